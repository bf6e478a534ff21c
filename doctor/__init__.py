"""ds-doctor: runtime diagnostics for distributed PyTorch training stacks."""

__version__ = "0.1.0"

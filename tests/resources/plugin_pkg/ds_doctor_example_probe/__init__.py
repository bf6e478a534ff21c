"""An example probe package for ds-doctor (see docs/writing-probes.md)."""

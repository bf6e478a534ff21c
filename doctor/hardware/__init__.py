"""The node: environment and package versions (no torch import) and NVML readings per GPU."""

"""ds-doctor: runtime diagnostics for distributed PyTorch training stacks.

One import name, `ds_doctor`, holds everything: the engine here (the source folder `doctor/`), the built-in probe
families (`ds_doctor.probes`, the folder `probes/`) and the renderers (`ds_doctor.reports`, the folder `reports/`).
A training repository's own `doctor/`, `probes/` or `reports/` package shadows nothing.
"""

__version__ = "0.1.0"

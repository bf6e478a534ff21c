"""For a probe whose case goes on in a process of its own (a resume in a fresh process group): how to start it the
way ds-doctor starts its ranks, and how that process finds its case again under the run's options."""

from ds_doctor.probe.registry import find_case
from ds_doctor.procs import die_with_parent, module_command
from ds_doctor.run.extensions import interpreter_first, private_extensions_dir

__all__ = ["die_with_parent", "find_case", "interpreter_first", "module_command", "private_extensions_dir"]

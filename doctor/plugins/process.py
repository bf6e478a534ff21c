"""For a probe whose case goes on in a process of its own (a resume in a fresh process group): how to start it the
way ds-doctor starts its ranks, and how that process finds its case again under the run's options; and the
DeepSpeed ops the run builds before its launches."""

from ds_doctor.ops import DEEPSPEED_OPS, interpreter_first
from ds_doctor.ops.locks import heal_op
from ds_doctor.probe.registry import find_case
from ds_doctor.procs import die_with_parent, module_command

__all__ = ["DEEPSPEED_OPS", "die_with_parent", "find_case", "heal_op", "interpreter_first", "module_command"]

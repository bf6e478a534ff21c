"""For a probe whose case goes on in a process of its own (a resume in a fresh process group, a reference with no
process group): start it the way ds-doctor starts its ranks, have it end with the rank that started it, and find the
case again there under the run's options; and load the DeepSpeed ops the run builds before its launches.

These are functions of the plugin API, each with its own contract: what they call inside ds-doctor may change, they
do not.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from ds_doctor.ops import DEEPSPEED_OPS
from ds_doctor.ops.locks import heal_op
from ds_doctor.probe import registry
from ds_doctor.probe.rankoptions import RankOptions
from ds_doctor.probe.spec import Case
from ds_doctor.procs import die_with_parent, module_command

__all__ = ["command", "end_with_parent", "find_case", "load_deepspeed_ops"]


def command(module: str) -> list[str]:
    """The command line that runs `python -m <module>` as ds-doctor starts its ranks: this interpreter, with
    ds-doctor's own packages ahead of the working directory on the path (so a training repository's own `doctor/`
    or `probes/` shadows nothing). The process's own arguments go after it."""
    return module_command(module)


def end_with_parent() -> None:
    """The first call in a process a rank started: on Linux it is sent SIGTERM when the rank that started it dies,
    so a killed or timed-out case leaves no process behind (elsewhere this does nothing)."""
    die_with_parent()


def find_case(case_id: str, options: RankOptions) -> Case:
    """In a process a rank started: the case `case_id` (that rank's `ctx.case_id`) with the params its variant has
    under `options` (that rank's `ctx.options`, handed over as `options.to_json()` and read back with
    `RankOptions.from_json`), never under this process's environment. KeyError where no probe has that case."""
    return registry.find_case(case_id, options)


def load_deepspeed_ops(enter: Callable[[str], object] = lambda _: None) -> list[str]:
    """Load the DeepSpeed ops this accelerator has (CPU Adam, fused Adam, the CPU shared-memory comm), as a probe's
    `setup` does before its DeepSpeed cases: the run's build phase built them before the launch, so they only load
    here (a build happens where a probe runs outside `ds-doctor run`). A build lock a killed launch's rank left in
    the run's extensions folder is cleared first, and said on stderr. `enter(stage)` is called before each op loads
    (`ctx.enter`, so a hang names the op); the names of the ops loaded."""
    from deepspeed.accelerator import get_accelerator

    loaded = []
    for builder_name in DEEPSPEED_OPS:
        builder = get_accelerator().create_op_builder(builder_name)
        if builder is not None and builder.is_compatible(verbose=False):
            enter(f"load {builder_name}")
            if (line := heal_op(builder.name, os.environ)) is not None:
                print(f"ds-doctor: {line}", file=sys.stderr)
            builder.load()
            loaded.append(builder_name)
    return loaded

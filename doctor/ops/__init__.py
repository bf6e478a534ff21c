"""DeepSpeed's JIT-built ops as a set-up phase of a run: built before any launch, through locks judged and healed."""

from __future__ import annotations

import os
import sys

# Built once per node and stack before any launch, with progress said and a bound of its own (`phase`), in the folder
# the user's jobs of this environment share (`cache`), through torch's build locks, judged and cleared where their
# builder is gone (`locks`). `python -m ds_doctor.ops` builds (or loads) them alone, saying what it does: `make`'s
# set-up runs it.

#: DeepSpeed's ops the probes load: its Adams, and on a CPU node the shared-memory comm `init_distributed` builds
DEEPSPEED_OPS = ("CPUAdamBuilder", "FusedAdamBuilder", "ShareMemCommBuilder")


def interpreter_first(path: str | None) -> str:
    """`path` (a PATH value) with this interpreter's folder first: torch's JIT runs `ninja` from PATH, and another
    ninja (the system's 1.11 against the venv's 1.13) records builds differently, so every op was rebuilt (100-225 s)
    when the venv's ds-doctor ran with the system's ninja first. What builds the ops and what loads them use this."""
    return os.pathsep.join([os.path.dirname(sys.executable), path if path is not None else os.defpath])

"""The ninja that builds and loads DeepSpeed's ops: this interpreter's, whatever PATH the user has (where and when
the ops are built is `ds_doctor.ops`)."""

from __future__ import annotations

import os
import sys


def interpreter_first(path: str | None) -> str:
    """`path` (a PATH value) with this interpreter's folder first: torch's JIT runs `ninja` from PATH, and another
    ninja (the system's 1.11 against the venv's 1.13) records builds differently, so every op was rebuilt (100-225 s)
    when the venv's ds-doctor ran with the system's ninja first. What builds the ops and what loads them use this."""
    return os.pathsep.join([os.path.dirname(sys.executable), path if path is not None else os.defpath])

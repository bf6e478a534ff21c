"""`python -m ds_doctor.ops`: build (or load) DeepSpeed's ops alone, saying what it does, as a run's build phase
would; `make`'s set-up runs it once. Exit code 0 when every op is there, 1 when one failed or the build was
stopped, 2 for a bad DS_DOCTOR_BUILD_TIMEOUT."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from ds_doctor.ops.phase import bound_from, build_ops


def _stopped(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signum)  # the build is stopped and its lock cleared on the way out


def main() -> int:
    for stopping in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stopping, _stopped)
    try:
        bound = bound_from(os.environ)
    except ValueError as exc:
        print(f"ds-doctor: error: {exc}", file=sys.stderr)
        return 2
    home_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    logs = Path(home_cache) / "ds-doctor" / "ops-build"
    try:
        ready = build_ops(os.environ, logs, lambda line: print(line, flush=True), bound)
    except KeyboardInterrupt as exc:
        signum = int(exc.args[0]) if exc.args else int(signal.SIGINT)
        print(f"ds-doctor: the op build was stopped by {signal.Signals(signum).name}", flush=True)
        return 128 + signum
    if ready.failure is not None:
        print(f"ds-doctor: {ready.failure}", flush=True)
        return 1
    states = ", ".join(f"{o.op} {o.state}" for o in ready.ops) or "none (DeepSpeed builds none here)"
    print(f"ds-doctor: DeepSpeed's ops: {states}, in {ready.folder}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the benchmarks share: a `ds-doctor run` timed as a fresh process (the benchmarks run as scripts, from
bench/, so they import this as `runs`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path


def timed_run(args: list[str], out: Path) -> tuple[float, dict]:
    """`ds-doctor run ARGS --out OUT` in a new process: its wall time and the report it wrote."""
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ds_doctor.cli", "run", *args, "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    elapsed = time.perf_counter() - started
    newest = max(out.glob("ds-doctor-*.json"), key=lambda p: p.stat().st_mtime)
    return elapsed, json.loads(newest.read_text())

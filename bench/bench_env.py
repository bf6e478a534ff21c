"""`ds-doctor env` against DeepSpeed's `ds_report`, both timed in one run on this machine.

Target (issue 2): ds-doctor env takes under a quarter of ds_report's time. Each command runs
REPEATS times as a fresh process; the median wall time is compared. Exit 1 if the target is missed.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPEATS = 5
TARGET_RATIO = 0.25


def time_command(command: list[str]) -> float:
    samples = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> int:
    bin_dir = Path(sys.executable).parent
    ds_report = shutil.which("ds_report", path=str(bin_dir)) or shutil.which("ds_report")
    if ds_report is None:
        print("ds_report not found: pip install deepspeed")
        return 1
    doctor = time_command([sys.executable, "-m", "ds_doctor.cli", "env"])
    peer = time_command([ds_report])
    ratio = doctor / peer
    print(f"ds-doctor env: {doctor * 1000:.0f} ms (median of {REPEATS})")
    print(f"ds_report:     {peer * 1000:.0f} ms (median of {REPEATS})")
    print(f"ratio: {ratio:.3f} (target < {TARGET_RATIO})")
    return 0 if ratio < TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())

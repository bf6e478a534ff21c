"""The nightly smoke's costs on this machine: `ds-doctor run --level 1` (target: under 5 s, issue 6:
"level 1 in seconds") and the level-2 hardware families (`-k "comm or compute"`), each as a fresh
process; prints the time and, for the families, the measured busbw and TFLOP/s per case.
Exit 1 if level 1 misses its target."""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from runs import timed_run

from ds_doctor.reports.measures import format_measure

REPEATS = 3
LEVEL1_TARGET_S = 5.0


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        level1 = statistics.median(
            timed_run(["--level", "1"], Path(tmp) / f"l1-{i}")[0] for i in range(REPEATS)
        )
        families, report = timed_run(["-k", "comm or compute"], Path(tmp) / "families")
    print(f"run --level 1: {level1:.2f} s (median of {REPEATS}; target < {LEVEL1_TARGET_S:g} s)")
    print(
        f"run -k 'comm or compute' (level 2): {families:.1f} s, {len(report['results'])} cases, "
        f"{report['summary']}"
    )
    for result in report["results"]:
        measured = [
            format_measure(k, v, result["world_size"])
            for k, v in result["measures"].items()
            if k in ("busbw_gbps", "algbw_gbps", "tflops")
        ]
        print(f"  {result['case']}: {result['outcome']} {', '.join(measured)}")
    return 0 if level1 < LEVEL1_TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

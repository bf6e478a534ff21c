"""The equivalence family's cost on this machine (issue 25: at most 20 s added to `ds-doctor run --level 2`).

Times, each as a fresh `ds-doctor run` process: the whole level 2 with and without the family (the difference is
what it adds; REPEATS each, medians, interleaved so that a load spike hits both), the family alone at level 2 and
at level 3, with every case's duration. Exit 1 if the level-2 addition misses its target (the sum of the family's
own case durations inside the full run is printed beside it: the wall difference on a shared 2-core machine is
noisy, that sum is not)."""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from runs import timed_run

REPEATS = 2
TARGET_S = 20.0


def family(report: dict) -> list[dict]:
    return [r for r in report["results"] if r["probe"] == "equivalence"]


def show(label: str, elapsed: float, report: dict) -> None:
    cases = family(report)
    outcomes = sorted({r["outcome"] for r in cases})
    print(
        f"{label}: {elapsed:.1f} s wall, {len(cases)} cases ({', '.join(outcomes)}), "
        f"{sum(r['duration_s'] for r in cases):.1f} s in the cases"
    )
    for result in cases:
        print(f"  {result['case']}: {result['outcome']} {result['duration_s']:.1f} s")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        full, without, inside = [], [], []
        for i in range(REPEATS):
            elapsed, report = timed_run(["--level", "2"], root / f"full-{i}")
            full.append(elapsed)
            inside.append(sum(r["duration_s"] for r in family(report)))
            without.append(timed_run(["--level", "2", "-k", "not equivalence"], root / f"without-{i}")[0])
        level2 = timed_run(["--level", "2", "-k", "equivalence"], root / "level2")
        level3 = timed_run(["--level", "3", "-k", "equivalence"], root / "level3")
    added = statistics.median(full) - statistics.median(without)
    print(
        f"run --level 2: {statistics.median(full):.1f} s with the family, {statistics.median(without):.1f} s without "
        f"(medians of {REPEATS}): {added:+.1f} s added (target <= {TARGET_S:g} s); the family's cases inside the "
        f"full run: {statistics.median(inside):.1f} s"
    )
    show("run --level 2 -k equivalence", *level2)
    show("run --level 3 -k equivalence", *level3)
    return 0 if added <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())

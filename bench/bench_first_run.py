"""A first run as a new user meets it on a busy node (issue 45): `ds-doctor run --level 2` in a fresh HOME (its ops
not built anywhere it looks), beside a CPU hog of twice the cores. It prints every line the run said with the time
it said it, the longest silence, the build phase's time, the run's time and its outcomes, and exits 1 where a case
timed out or the run stayed silent for longer than QUIET_S (30 s, plus the poll that notices it).

This builds DeepSpeed's ops from nothing (about 3 minutes on 2 quiet cores, 10 or more loaded): `make first-run`, never
part of `make test` (whose own tests kill and heal a real build: tests/ops/). Options: `--no-hog` (the same on a
quiet box), `--level N`."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUIET_S = 30.0
SLACK_S = 2.0  # the poll that notices a silence, and the console's flush


def hog(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` processes that spin a core each, at the same priority as the run."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def run_first(level: int, home: Path, out: Path) -> tuple[list[tuple[float, str]], int, float]:
    """The run's lines with the seconds since its start, its exit code and its wall time."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_EXTENSIONS_DIR", "XDG_CACHE_HOME")}
    env["HOME"] = str(home)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ds_doctor.cli", "run", "--level", str(level), "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append((time.monotonic() - started, line.rstrip("\n")))
        print(f"{lines[-1][0]:7.1f}s  {line.rstrip()}", flush=True)
    code = proc.wait()
    return lines, code, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-hog", action="store_true")
    parser.add_argument("--level", type=int, default=2)
    args = parser.parse_args()
    spinners = [] if args.no_hog else hog(2 * (os.cpu_count() or 1))
    try:
        with tempfile.TemporaryDirectory(prefix="ds-doctor-first-run-") as folder:
            home = Path(folder) / "home"  # a HOME whose last part is `home`, as the containers had
            home.mkdir()
            lines, code, wall = run_first(args.level, home, Path(folder) / "out")
            report = json.loads(next((Path(folder) / "out").glob("ds-doctor-*.json")).read_text())
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()
    stamps = [0.0] + [t for t, _ in lines] + [wall]
    gaps = [(b - a, i) for i, (a, b) in enumerate(itertools.pairwise(stamps))]
    longest, where = max(gaps)
    after = lines[where - 1][1] if where > 0 else "(the start)"
    built = [t for t, line in lines if ": built in " in line or ": loaded in " in line]
    outcomes: dict[str, int] = {}
    for result in report["results"]:
        outcomes[result["outcome"]] = outcomes.get(result["outcome"], 0) + 1
    print(
        f"\nload: {'none' if args.no_hog else f'{len(spinners)} spinning processes'} on {os.cpu_count()} cores"
    )
    print(
        f"wall time {wall:.0f} s; the build phase ended at {max(built):.0f} s"
        if built
        else f"wall {wall:.0f} s"
    )
    print(f"longest silence {longest:.1f} s, after: {after[:120]}")
    print(f"exit code {code}; outcomes {outcomes}")
    bad = outcomes.get("timeout", 0) > 0 or longest > QUIET_S + SLACK_S
    print("FAILED: a timeout, or a silence over 30 s" if bad else "ok: no timeout, never silent over 30 s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

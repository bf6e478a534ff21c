"""Before and after a catalog change: every held-out collection through `bench_triage_heldout.py`, and what changed.

The protocol of issue 48 records a fresh sample's first run before any fix; each fix is then checked on every earlier
collection, so that a wording added for one ticket names nothing else. This runs them all (bench/triage_heldout and
every bench/triage_fresh/*), two at a time, each into `<out>/<collection>.json`, and compares two such folders text
by text: the verdict, the entries named (with how they matched) and the extra ones beside a right answer.

Usage, from the repository root:
    python bench/triage_regress.py run --ds-doctor PATH OUT     (PATH: a ds-doctor of the tree to measure; a frozen
                                                                copy of the tree, so an edit meanwhile changes nothing)
    python bench/triage_regress.py compare BEFORE AFTER         (prints each text that changed; exit 1 if any did)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
HELDOUT = HERE / "bench_triage_heldout.py"


def collections() -> list[Path]:
    """bench/triage_heldout, then every fresh sample in name order."""
    return [HERE / "triage_heldout", *sorted(p for p in (HERE / "triage_fresh").iterdir() if p.is_dir())]


def run_one(collection: Path, ds_doctor: str, out: Path, timeout: float) -> str:
    name = collection.name
    with (out / f"{name}.txt").open("w") as log:
        proc = subprocess.run(
            [
                *(sys.executable, str(HELDOUT), "--ds-doctor", ds_doctor),
                *("--collection", str(collection), "--json", str(out / f"{name}.json")),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    return f"{name}: exit {proc.returncode}"


def run(ds_doctor: str, out: Path, jobs: int, timeout: float) -> int:
    out.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        done = list(pool.map(lambda c: run_one(c, ds_doctor, out, timeout), collections()))
    print("\n".join(done))
    return 0 if all(line.endswith("exit 0") for line in done) else 1


def rows(path: Path) -> dict[str, tuple[str, str, str]]:
    """Each text's verdict, the entries named and the extra ones, as comparable strings."""
    return {
        row["label"]["file"]: (
            row.get("verdict", ""),
            json.dumps(row.get("named"), sort_keys=True),
            json.dumps(row.get("extra"), sort_keys=True),
        )
        for row in json.loads(path.read_text())
    }


def compare(before: Path, after: Path) -> int:
    changed = 0
    for old in sorted(before.glob("*.json")):
        new = after / old.name
        if not new.exists():
            print(f"{old.stem}: not in {after}")
            changed += 1
            continue
        a, b = rows(old), rows(new)
        for text in sorted(set(a) | set(b)):
            if a.get(text) != b.get(text):
                changed += 1
                print(f"{old.stem} {text}\n  before: {a.get(text)}\n  after:  {b.get(text)}")
    added = sorted({p.name for p in after.glob("*.json")} - {p.name for p in before.glob("*.json")})
    for name in added:
        print(f"{name.removesuffix('.json')}: new in {after} (not compared)")
    print(f"{changed} text(s) changed")
    return 1 if changed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="every collection into OUT")
    run_p.add_argument("--ds-doctor", required=True, help="the ds-doctor executable to measure")
    run_p.add_argument("--jobs", type=int, default=2, help="collections at once (default 2)")
    run_p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per collection")
    run_p.add_argument("out", type=Path)
    cmp_p = sub.add_parser("compare", help="what changed between two runs")
    cmp_p.add_argument("before", type=Path)
    cmp_p.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args.ds_doctor, args.out, args.jobs, args.timeout)
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())

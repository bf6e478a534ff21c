"""The knob matrix run ahead of any bug (issue 50): a selection of its settings at each release given (`ds-doctor run
--level 3 -k EXPR --with PKG==VER`), every fail and error listed by the catalog entry that names it (and whether its
range holds the release), and the ones no entry names listed apart: those are what to read next, with the ones only
a class names (a kind of failure, not its cause). The sweep of
2026-11-30 (docs/invariants.md, "The matrix swept over releases") found a DeepSpeed and two transformers bugs this way.

A maintainer's command, not part of `make bench`: each release is an overlay to install, and each DeepSpeed release
builds its ops (minutes). Exits 1 where any fail or error is named by no entry, or by a class alone.

    python bench/sweep_matrix.py -k "equivalence and matrix-trainer" transformers 5.1.0 5.12.0
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
from pathlib import Path

from runs import timed_run

from ds_doctor.knowledge.catalog import ISSUES
from ds_doctor.releases.verify import ran_on

#: what a sweep lists: a case that failed, raised or hung
BAD = ("fail", "error", "timeout")
#: the catalog's classes (a segfault, an import error, a keyword the callee does not take): a kind of failure, not
#: its cause, so a case they alone name is read like an unnamed one
CLASSES = frozenset(issue.id for issue in ISSUES if issue.fallback)


def unnamed(results: list[dict]) -> list[dict]:
    """The fails and errors no catalog entry names."""
    return [r for r in results if r["outcome"] in BAD and not (r.get("known_issue") or {}).get("id")]


def named(results: list[dict]) -> collections.Counter:
    """(outcome, entry, verdict) of each fail, error and timeout an entry names, counted."""
    counts: collections.Counter = collections.Counter()
    for r in results:
        issue = r.get("known_issue") or {}
        if r["outcome"] in BAD and issue.get("id"):
            counts[(r["outcome"], issue["id"], issue.get("verdict"))] += 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-k", dest="expr", required=True, help="the settings, as `ds-doctor run -k`")
    parser.add_argument("package", help="the distribution whose releases are swept")
    parser.add_argument("versions", nargs="+", help="its releases")
    args = parser.parse_args()
    clean = True
    with tempfile.TemporaryDirectory(prefix="ds-doctor-sweep-") as tmp:
        for version in args.versions:
            out = Path(tmp) / version
            out.mkdir()
            spec = f"{args.package}=={version}"
            elapsed, report = timed_run(["--level", "3", "-k", args.expr, "--with", spec], out)
            results = ran_on(report, spec)  # the overlay's alone, not the installed stack's run beside it
            outcomes = collections.Counter(r["outcome"] for r in results)
            print(f"{spec}: {elapsed:.0f} s (the installed stack's run beside it), {dict(outcomes)}")
            for (outcome, issue, verdict), count in sorted(named(results).items()):
                clean = clean and issue not in CLASSES
                kind = ", a class: read them" if issue in CLASSES else ""
                print(f"  {count:4d} {outcome} {issue} ({verdict}{kind})")
            for result in unnamed(results):
                clean = False
                print(
                    f"  unnamed {result['outcome']}: {result['case']}: {(result.get('reason') or '')[:200]}"
                )
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())

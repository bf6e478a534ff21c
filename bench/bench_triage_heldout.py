"""`ds-doctor triage` on a held-out collection of real ticket texts: how often it names the right known issue.

The texts and their labels are in bench/triage_heldout/ (index.toml says how they were chosen, and what the right
answer of each is, written before triage was run on any). Each text goes through `ds-doctor triage --json FILE` as a
fresh process, with a timeout; the entries it names are compared with the label:

- right (certain): the expected entry (or one of `also_ok`) is named, and not as "possibly";
- right (possibly): it is named, only as "possibly" (a guess triage says to confirm);
- wrong: something is named, and not the expected entry (a false claim; split by certain / possibly);
- missed: nothing named where the catalog has the cause;
- silent (correct): nothing named where the catalog lacks the cause.

Entries named beside the right one are listed as extra. Prints one line per text (with its time), the counts, and
the causes the catalog lacks with how many texts each. Exit 0 unless a text could not be run.

Usage (from the repository root): python bench/bench_triage_heldout.py [--ds-doctor PATH] [--timeout S] [--json OUT]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
COLLECTION = HERE / "triage_heldout"
REPO = HERE.parent

LISTED = re.compile(r"\s*(?:&|,|/|\band\b|\bor\b)\s*", re.IGNORECASE)
RIGHT = "right (certain)"
RIGHT_POSSIBLY = "right (possibly)"
WRONG = "wrong (certain)"
WRONG_POSSIBLY = "wrong (possibly)"
MISSED = "missed"
SILENT = "silent (correct)"
FAILED = "not run"
VERDICTS = (RIGHT, RIGHT_POSSIBLY, WRONG, WRONG_POSSIBLY, MISSED, SILENT, FAILED)


@dataclasses.dataclass(frozen=True)
class Label:
    file: str
    url: str
    expected: str  # a catalog id, or "none"
    also_ok: tuple[str, ...]
    cause: str  # the class, where expected is "none"
    hard_negative: bool
    recurring: bool = False  # an everyday class (out of memory, NaN loss, an install mismatch, ...)
    versions: tuple[tuple[str, str], ...] = ()  # the versions the text states, as the labeller read them

    @property
    def accepted(self) -> frozenset[str]:
        return frozenset((self.expected, *self.also_ok)) - {"none"}


@dataclasses.dataclass(frozen=True)
class Named:
    id: str
    possibly: bool
    strength: str
    kind: str = "wording"  # how it matched: wording, loose, cut, frame, banner

    def shown(self) -> str:
        return f"{self.id}?" if self.possibly else self.id


@dataclasses.dataclass(frozen=True)
class Outcome:
    label: Label
    named: tuple[Named, ...]
    findings: int
    seconds: float
    verdict: str
    extra: tuple[str, ...] = ()
    error: str = ""
    versions_read: tuple[str, ...] = ()  # the labelled versions triage read from the text as stated


def read_labels(index: Path) -> list[Label]:
    data = tomllib.loads(index.read_text(encoding="utf-8"))
    return [
        Label(
            file=t["file"],
            url=t["url"],
            expected=t.get("entry_since", t["expected"]),
            also_ok=tuple(t.get("also_ok", ())),
            cause=t.get("class", ""),
            hard_negative=bool(t.get("hard_negative", False)),
            recurring=bool(t.get("recurring", False)),
            versions=tuple(sorted((str(k), str(v)) for k, v in (t.get("versions") or {}).items())),
        )
        for t in data["text"]
    ]


def run_triage(ds_doctor: str, path: Path, timeout: float) -> tuple[float, dict | None, str]:
    """`ds-doctor triage --json PATH` in a new process: its wall time, its JSON, and what went wrong (or "")."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [ds_doctor, "triage", "--json", str(path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return time.perf_counter() - started, None, f"timed out after {timeout:g} s"
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):  # 0: something found, 1: nothing found
        return elapsed, None, f"exit {done.returncode}: {done.stderr.strip()[-300:]}"
    try:
        return elapsed, json.loads(done.stdout), ""
    except ValueError as exc:
        return elapsed, None, f"not JSON ({exc})"


def judge(label: Label, named: tuple[Named, ...]) -> tuple[str, tuple[str, ...]]:
    """The verdict for one text, and the entries named beside a right one."""
    right = [n for n in named if n.id in label.accepted]
    if right:
        extra = tuple(n.shown() for n in named if n.id not in label.accepted)
        return (RIGHT if any(not n.possibly for n in right) else RIGHT_POSSIBLY), extra
    if named:
        return (WRONG_POSSIBLY if all(n.possibly for n in named) else WRONG), ()
    return (MISSED if label.accepted else SILENT), ()


def measure(label: Label, ds_doctor: str, timeout: float, collection: Path = COLLECTION) -> Outcome:
    seconds, data, error = run_triage(ds_doctor, collection / label.file, timeout)
    if data is None:
        return Outcome(label, (), 0, seconds, FAILED, error=error)
    named = tuple(
        Named(m["id"], bool(m.get("possibly")), str(m.get("strength", "")), str(m.get("kind", "wording")))
        for m in data.get("matches", [])
    )
    verdict, extra = judge(label, named)
    from_log = {
        k: [v.get("version"), *v.get("also", [])]
        for k, v in data.get("versions", {}).items()
        if v.get("source") == "the log"
    }
    # a label of several versions ("0.15.3 & 0.14.5", as the text lists them) is read when triage reads each, in order
    read = tuple(f"{k} {v}" for k, v in label.versions if from_log.get(k) == LISTED.split(v))
    return Outcome(label, named, len(data.get("findings", [])), seconds, verdict, extra, versions_read=read)


def line(outcome: Outcome) -> str:
    label = outcome.label
    expected = label.expected + (f" [{label.cause}]" if label.expected == "none" else "")
    named = ", ".join(n.shown() for n in outcome.named) or "-"
    notes = [f"extra: {', '.join(outcome.extra)}"] if outcome.extra else []
    notes += [f"{outcome.findings} watchdog finding(s)"] if outcome.findings else []
    notes += ["hard negative"] if label.hard_negative else []
    notes += [outcome.error] if outcome.error else []
    tail = f"  ({'; '.join(notes)})" if notes else ""
    return (
        f"{label.file:<52} {outcome.seconds * 1000:6.0f} ms  {outcome.verdict:<17} "
        f"expected {expected}; named {named}{tail}"
    )


def summary(outcomes: list[Outcome]) -> list[str]:
    counts = Counter(o.verdict for o in outcomes)
    known = [o for o in outcomes if o.label.accepted]
    unknown = [o for o in outcomes if not o.label.accepted]
    right = counts[RIGHT] + counts[RIGHT_POSSIBLY]
    wrong_known = sum(o.verdict in (WRONG, WRONG_POSSIBLY) for o in known)
    wrong_unknown = sum(o.verdict in (WRONG, WRONG_POSSIBLY) for o in unknown)
    hard = [o for o in outcomes if o.label.hard_negative]
    times = sorted(o.seconds for o in outcomes)
    recurring = [o for o in outcomes if o.label.recurring]
    recurring_right = sum(o.verdict in (RIGHT, RIGHT_POSSIBLY) for o in recurring)
    kinds = Counter(
        next(n.kind for n in o.named if n.id in o.label.accepted)
        for o in outcomes
        if o.verdict in (RIGHT, RIGHT_POSSIBLY)
    )
    stated = sum(len(o.label.versions) for o in outcomes)
    read = sum(len(o.versions_read) for o in outcomes)
    missed_versions = [
        f"{o.label.file}: {k} {v}"
        for o in outcomes
        for k, v in o.label.versions
        if f"{k} {v}" not in o.versions_read
    ]
    out = [
        f"texts: {len(outcomes)} ({len(known)} whose cause the catalog has, {len(unknown)} whose cause it lacks; "
        f"{len(hard)} hard negatives)",
        *(f"  {v:<18} {counts[v]}" for v in VERDICTS if counts[v] or v != FAILED),
        f"hit rate on known causes: {right}/{len(known)} named right"
        f" ({counts[RIGHT]} certain, {counts[RIGHT_POSSIBLY]} possibly), {counts[MISSED]} missed,"
        f" {wrong_known} named wrong",
        f"false claims: {wrong_known + wrong_unknown} ({counts[WRONG]} certain, {counts[WRONG_POSSIBLY]} possibly;"
        f" {wrong_unknown} on causes the catalog lacks, of them"
        f" {sum(o.verdict in (WRONG, WRONG_POSSIBLY) for o in hard)} hard negatives);"
        f" correct silence {counts[SILENT]}/{len(unknown)}",
        f"recurring-class texts (out of memory, NaN, install, ...): {recurring_right}/{len(recurring)} named right",
        "right, by how the right entry matched: "
        + (", ".join(f"{kind} {n}" for kind, n in kinds.most_common()) or "-"),
        f"extra entries named beside a right one: {sum(len(o.extra) for o in outcomes)}",
        f"versions stated in the texts (labelled) read as stated: {read}/{stated}"
        + (f" (not: {'; '.join(missed_versions)})" if missed_versions else ""),
        f"time per text: median {times[len(times) // 2] * 1000:.0f} ms, max {times[-1] * 1000:.0f} ms,"
        f" total {sum(times):.1f} s",
        "causes the catalog lacks (texts):",
        *(f"  {n:>2}  {cause}" for cause, n in Counter(o.label.cause for o in unknown).most_common()),
    ]
    return out


def default_ds_doctor() -> str:
    venv = REPO / ".venv" / "bin" / "ds-doctor"
    return str(venv) if venv.exists() else (shutil.which("ds-doctor") or "ds-doctor")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ds-doctor", default=default_ds_doctor(), help="the ds-doctor executable")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds allowed per text")
    parser.add_argument("--json", type=Path, default=None, help="also write every outcome to this JSON file")
    parser.add_argument(
        "--collection", type=Path, default=COLLECTION, help="a folder of texts and their index.toml"
    )
    args = parser.parse_args(argv)
    outcomes = [
        measure(label, args.ds_doctor, args.timeout, args.collection)
        for label in read_labels(args.collection / "index.toml")
    ]
    for outcome in outcomes:
        print(line(outcome))
    print()
    print("\n".join(summary(outcomes)))
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(o) for o in outcomes], indent=2) + "\n")
    return 1 if any(o.verdict == FAILED for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())

"""What the parent makes of a hung launch's forensics directory: each rank's folded stacks and its position in
each process group, and the findings torch's analyzer supports (a rank that never joined, a collective the ranks
disagree on)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable

from ds_doctor.checks.hang import collective_mismatch, missing_rank
from ds_doctor.forensics.capture import THREAD_NAME
from ds_doctor.forensics.flight import disagreements, load_dir, positions
from ds_doctor.forensics.stacks import parse_faulthandler
from ds_doctor.reports.hang import CollectivePosition, ThreadStack
from ds_doctor.reports.model import Finding
from ds_doctor.rundir import LaunchDir

NATIVE_CHARS = 4000


@dataclasses.dataclass
class Evidence:
    stacks: dict[int, tuple[ThreadStack, ...]] = dataclasses.field(default_factory=dict)
    positions: dict[int, tuple[CollectivePosition, ...]] = dataclasses.field(default_factory=dict)
    native: dict[int, str] = dataclasses.field(default_factory=dict)  # py-spy's dump, where it ran
    findings: list[Finding] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    took_s: float | None = None
    source: str | None = None  # "torch Flight Recorder" or "ds-doctor thin record"

    def summary(self) -> dict[str, object]:
        """How the evidence was had, for the case's notes."""
        took = None if self.took_s is None else round(self.took_s, 2)
        return {
            "took_s": took,
            "stacks_of_ranks": sorted(self.stacks),
            "recorded_ranks": sorted(self.positions),
            "collectives_from": self.source,
            "native_stacks": "py-spy"
            if self.native
            else "none (install py-spy, the `hang` extra, for native frames)",
            "problems": self.notes,
        }

    def findings_of(self, rank: int, first_rank: int) -> list[Finding]:
        """The findings a rank's line carries: its own, and on the first rank those about no rank in particular."""
        return [f for f in self.findings if f.rank == rank or (f.rank is None and rank == first_rank)]


def without_thread(py_spy: str, name: str) -> str:
    """py-spy's dump less one thread's block (the doctor's own forensics thread, busy answering the request)."""
    blocks = re.split(r"(?m)^(?=Thread \d+ )", py_spy)
    return "".join(b for b in blocks if not re.match(rf'Thread \d+ \([^)]*\): "{re.escape(name)}"', b))


def _thread_names(launch: LaunchDir, rank: int) -> tuple[dict[int, str], frozenset[int]]:
    try:
        names = json.loads(launch.thread_names(rank).read_text())
    except (OSError, ValueError):
        return {}, frozenset()
    skip = frozenset({int(names.pop("skip"))} if "skip" in names else ())
    return {int(ident): name for ident, name in names.items()}, skip


def read_stacks(launch: LaunchDir, rank: int) -> tuple[ThreadStack, ...]:
    try:
        text = launch.stacks_text(rank).read_text(errors="replace")
    except OSError:
        return ()
    names, skip = _thread_names(launch, rank)
    return parse_faulthandler(text, names, skip)


def read(launch: LaunchDir, ranks: Iterable[int], took_s: float | None = None) -> Evidence:
    evidence = Evidence(took_s=took_s)
    for rank in ranks:
        if stacks := read_stacks(launch, rank):
            evidence.stacks[rank] = stacks
        native = launch.forensics / f"py-spy-rank{rank}.txt"
        if native.exists():
            evidence.native[rank] = without_thread(native.read_text(errors="replace"), THREAD_NAME)[
                :NATIVE_CHARS
            ]
    flight = launch.flight_dump(0).parent
    dumps, problems = load_dir(flight) if flight.is_dir() else ({}, [])
    evidence.notes += problems
    for rank, dump in dumps.items():
        evidence.source = str(dump.get("source", "torch Flight Recorder"))
        evidence.positions[rank] = positions(dump)
        if dump.get("error"):
            evidence.notes.append(f"rank {rank}: its Flight Recorder could not be dumped: {dump['error']}")
    evidence.findings, trouble = judge(dumps, evidence.stacks)
    evidence.notes += [trouble] if trouble else []
    return evidence


def judge(dumps: dict, stacks: dict[int, tuple[ThreadStack, ...]]) -> tuple[list[Finding], str | None]:
    """Findings from torch's analyzer over the dumps: who never joined, which collective the ranks disagree on."""
    found, trouble = disagreements(dumps)
    findings = []
    for d in found:
        for rank in d.missing:
            waiting = [r for r in d.expected if r not in d.missing]
            findings.append(missing_rank(rank, d.group, d.op, d.seq, waiting, stacks.get(rank, ())))
        if d.sides:
            findings.append(
                collective_mismatch(
                    d.group, d.seq, d.sides, d.culprit if d.culprit is not None else min(d.sides), d.kind
                )
            )
    return findings, trouble

"""What makes a distributed case slow or stuck, as findings: a straggler rank (from the per-rank stage times), and,
for a hung case, the collective the ranks disagree on or the rank that never joined (from torch's Flight Recorder
analysis, `ds_doctor.forensics.flight`).

A straggler is judged on when a rank *left* a stage as well as how long it spent there: a rank that waits in a
collective for a slow peer spends as long in that stage as the peer spent before it, but it leaves with everyone;
the straggler is the one the others waited for. When each rank left is compared on the ranks' clocks (`StageTime.at`):
ranks start a case at different times (one took longer over its probe's setup), and a rank that started early leaves
every stage later after its own start without anyone waiting for it. Only a case's own stages are judged (`JUDGED`):
in ds-doctor's scaffolding around a case (a probe's setup loading DeepSpeed's ops) ranks wait for one another by
design.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from ds_doctor.reports.hang import StageKind, StageTime, ThreadStack
from ds_doctor.reports.model import Finding, Severity

STRAGGLER_FACTOR = 3.0  # a rank this many times slower at a stage than the median of the others...
#: ...this much longer there, and this much later out of it (short stages jitter by multiples)
STRAGGLER_FLOOR_S = 0.5
#: the kinds of stage a straggler is judged in: the case's own, never ds-doctor's scaffolding around it
JUDGED = frozenset({StageKind.CASE})


def _stage_table(stages: Mapping[int, Sequence[StageTime]]) -> dict[str, dict[int, StageTime]]:
    table: dict[str, dict[int, StageTime]] = {}
    for rank, times in stages.items():
        for time in times:
            if time.kind in JUDGED:
                table.setdefault(time.stage, {})[rank] = time  # a stage entered twice: its last stretch
    return table


def _left(times: Mapping[int, StageTime]) -> dict[int, float]:
    """When each rank left the stage: on the ranks' clocks, or (a report from before `at`) since its case started."""
    if all(t.left_at is not None for t in times.values()):
        return {rank: t.left_at for rank, t in times.items() if t.left_at is not None}
    return {rank: t.end_s for rank, t in times.items()}


def stragglers(stages: Mapping[int, Sequence[StageTime]]) -> list[Finding]:
    """A warning per (stage, rank) where the rank took over 3x the others' median there, 0.5 s more, and left it
    last by 0.5 s; a case's own stages only (`JUDGED`)."""
    findings = []
    for stage, by_rank in _stage_table(stages).items():
        if len(by_rank) < 2:
            continue
        left = _left(by_rank)
        for rank, time in sorted(by_rank.items()):
            others = [t for r, t in by_rank.items() if r != rank]
            typical = statistics.median(t.duration_s for t in others)
            left_late = left[rank] - max(at for r, at in left.items() if r != rank)
            slower = (
                time.duration_s > STRAGGLER_FACTOR * typical and time.duration_s - typical > STRAGGLER_FLOOR_S
            )
            if slower and left_late > STRAGGLER_FLOOR_S:
                findings.append(
                    Finding(
                        "straggler",
                        Severity.WARNING,
                        f"rank {rank} is a straggler at stage {stage!r}: {time.duration_s:.2f} s there "
                        f"against a median of "
                        f"{typical:.2f} s on the other ranks, which waited {left_late:.2f} s for it",
                        rank=rank,
                        stage=stage,
                        expected=f"under {STRAGGLER_FACTOR:g}x the other ranks' median",
                        data={
                            "rank": rank,
                            "stage": stage,
                            "seconds": round(time.duration_s, 3),
                            "median_s": round(typical, 3),
                            "waited_s": round(left_late, 3),
                        },
                        remedy="look at what differs on that rank: its GPU (clocks, throttling: `ds-doctor run -k "
                        "gpu_health`), its host (CPU contention, swap), its data shard or I/O",
                    )
                )
    return findings


def where(rank: int, stacks: Sequence[ThreadStack]) -> str:
    """Where a rank's main thread is: its innermost frame that is not folded away."""
    main = next((s for s in stacks if s.name == "MainThread"), None) or next(
        (s for s in stacks if s.current), None
    )
    frame = main.innermost if main else None
    return f"rank {rank} is in {frame}" if frame else f"no stack of rank {rank} was taken"


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]} is" if len(ranks) == 1 else f"ranks {', '.join(map(str, sorted(ranks)))} are"


def missing_rank(
    rank: int, group: str, op: str, seq: int, waiting: Sequence[int], stacks: Sequence[ThreadStack]
) -> Finding:
    return Finding(
        "missing_rank",
        Severity.ERROR,
        f"rank {rank} never joined {op} #{seq} of process group {group}, which {_ranks(waiting)} "
        f"waiting in; {where(rank, stacks)}",
        rank=rank,
        stage="hang",
        expected=f"every rank of {group} enters collective #{seq}",
        data={"rank": rank, "group": group, "seq": seq, "collective": op, "waiting": sorted(waiting)},
        remedy="that rank's stack in this report shows where it is: a code path only some ranks take (a rank-"
        "dependent branch, an early return, uneven data), or a rank stuck in I/O or a lock",
    )


def collective_mismatch(group: str, seq: int, sides: Mapping[int, str], culprit: int, kind: str) -> Finding:
    """`sides`: rank -> "all_reduce of [[1024]] Float" for each rank at that sequence id."""
    text = "; ".join(f"rank {rank} is in {what}" for rank, what in sorted(sides.items()))
    return Finding(
        "collective_mismatch",
        Severity.ERROR,
        f"the ranks disagree on collective #{seq} of process group {group} ({kind}): {text}",
        rank=culprit,
        stage="hang",
        expected="every rank issues the same collective, sizes and dtypes",
        data={
            "rank": culprit,
            "group": group,
            "seq": seq,
            "kind": kind,
            "sides": {str(r): w for r, w in sides.items()},
        },
        remedy="every rank must issue the same collectives in the same order with matching shapes: look "
        "for a rank-dependent branch or a tensor whose shape differs across ranks (uneven shards)",
    )

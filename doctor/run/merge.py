"""Merge: one case's rank lines into its case result (records, findings, measures, notes from every rank), with
the outcome, reason and known-issue verdict the judge (`ds_doctor.run.judge`) gives them."""

from __future__ import annotations

from collections.abc import Mapping

from ds_doctor.checks.hang import stragglers
from ds_doctor.reports.model import CaseResult, Outcome, RankSummary
from ds_doctor.run import judge
from ds_doctor.run.judge import Judgement
from ds_doctor.rundir import PlannedCase, RankLine


def rank_summary(line: RankLine, judgement: Judgement) -> RankSummary:
    return RankSummary(
        rank=line.rank,
        outcome=judgement.outcome.value,
        stage=line.stage,
        reason=judgement.reason,
        exit_code=line.exit_code,
        signal=line.signal,
        stderr_tail=line.stderr_tail,
        traceback=line.error.traceback if line.error else None,
        node=line.node,
        stacks=line.stacks,
        collectives=line.collectives,
        stages=line.stages,
        native_stack=line.native_stack,
    )


def _first_of_each(dicts: list[dict]) -> dict:
    """Keys of every rank's dict, each with the value of the first rank that set it."""
    merged: dict = {}
    for entry in dicts:
        for key, value in entry.items():
            merged.setdefault(key, value)
    return merged


def merge_case(planned: PlannedCase, lines: list[RankLine], versions: Mapping[str, str | None]) -> CaseResult:
    lines = sorted(lines, key=lambda line: line.rank)
    findings = [f for line in lines for f in line.findings] + stragglers(
        {line.rank: line.stages for line in lines}
    )
    judged = judge.case(planned, lines, findings, versions)
    return CaseResult(
        probe=planned.probe,
        case=planned.case,
        scenario=planned.scenario,
        level=planned.level,
        world_size=planned.world_size,
        device_kind=planned.device_kind,
        outcome=judged.outcome,
        duration_s=max((line.duration_s for line in lines), default=0.0),
        reason=judged.reason,
        known_issue=judged.known_issue,
        findings=tuple(findings),
        device_map=tuple(r for line in lines for r in line.device_map),
        ranks=tuple(rank_summary(line, j) for line, j in zip(lines, judged.ranks, strict=True)),
        notes=_first_of_each([line.notes for line in lines]),
        measures=_first_of_each([line.measures for line in lines]),
        series=next((line.series for line in lines if line.series), ()),
        node=planned.node,
        nodes=planned.nodes,
        shared_gpu=planned.shared_gpu,
        shown_notes=tuple(dict.fromkeys(key for line in lines for key in line.shown_notes)),
    )


def skipped_case(planned: PlannedCase) -> CaseResult:
    return CaseResult(
        probe=planned.probe,
        case=planned.case,
        scenario=planned.scenario,
        level=planned.level,
        world_size=planned.world_size,
        device_kind=planned.device_kind,
        outcome=Outcome.SKIP,
        duration_s=0.0,
        reason=planned.skip_reason,
        node=planned.node,
        nodes=planned.nodes,
    )

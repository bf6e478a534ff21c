"""Merge per-rank lines into one case result, and give it its known-issue verdict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from doctor import known_issues
from doctor.devicemap import TensorRecord
from doctor.invariants import ERROR, Finding
from doctor.outcomes import Outcome, worst
from probes.base import Case, ProbeSpec
from reports.model import CaseResult, RankSummary


def rank_summary(line: Mapping[str, Any]) -> RankSummary:
    error = line.get("error") or {}
    return RankSummary(
        rank=int(line["rank"]),
        outcome=line["outcome"],
        stage=line.get("stage"),
        reason=line.get("reason"),
        exit_code=line.get("exit_code"),
        signal=line.get("signal"),
        stderr_tail=line.get("stderr_tail"),
        traceback=error.get("traceback"),
    )


def error_text(lines: list[Mapping[str, Any]]) -> str:
    """Everything the classifier may match: reasons, tracebacks, stderr tails of every rank."""
    parts = []
    for line in lines:
        error = line.get("error") or {}
        parts += [line.get("reason") or "", error.get("traceback") or "", line.get("stderr_tail") or ""]
    return "\n".join(p for p in parts if p)


def case_issue(lines: list[Mapping[str, Any]]) -> tuple[str, bool] | None:
    """The known issue a probe named for its case (`ctx.known_issue`), shown if any rank saw it."""
    named = [line["known_issue"] for line in lines if line.get("known_issue")]
    if not named:
        return None
    shown = [entry for entry in named if entry.get("shown")]
    return (shown or named)[0]["id"], bool(shown)


def known_issue_for(spec: ProbeSpec, case: Case, outcome: Outcome, findings: list[Finding], text: str,
                    versions: Mapping[str, str | None], named: tuple[str, bool] | None = None) -> dict[str, Any] | None:
    """An error matched against every known issue; else the issue the probe named for the case, or
    the family's own issue, with its verdict.

    The verdict is `affected` where the failure showed here (a matched error, an issue the probe
    saw, or an error finding from an invariant that detects the issue); `not_affected` where a
    reproduce case ran and it did not show; else it follows the installed version.
    """
    if outcome in (Outcome.ERROR, Outcome.TIMEOUT):
        hits = known_issues.classify(text)
        if hits:
            return hits[0].to_ref(known_issues.AFFECTED)
    if named is not None:
        issue, shown = known_issues.get(named[0]), named[1]
    elif spec.known_issues:
        issue = known_issues.get(spec.known_issues[0])  # the family's own issue
        shown = any(f.severity == ERROR and f.invariant in issue.invariants for f in findings)
    else:
        return None
    if shown or outcome == Outcome.XFAIL:
        return issue.to_ref(known_issues.AFFECTED)
    if case.reproduce and outcome == Outcome.XPASS:
        return issue.to_ref(known_issues.NOT_AFFECTED)
    return issue.to_ref(issue.version_verdict(versions))


def merge_case(case: Case, spec: ProbeSpec, lines: list[Mapping[str, Any]], device_kind: str,
               versions: Mapping[str, str | None]) -> CaseResult:
    lines = sorted(lines, key=lambda entry: int(entry["rank"]))
    outcomes = [Outcome(line["outcome"]) for line in lines]
    outcome = worst(outcomes)
    findings = [Finding.from_dict(f) for line in lines for f in line.get("findings", [])]
    records = [TensorRecord.from_dict(r) for line in lines for r in line.get("device_map", [])]
    reason = next((line.get("reason") for line in lines if Outcome(line["outcome"]) == outcome and line.get("reason")), None)
    notes: dict[str, Any] = {}
    for line in lines:
        for key, value in (line.get("notes") or {}).items():
            notes.setdefault(key, value)
    return CaseResult(
        probe=case.probe,
        case=case.id,
        scenario=case.scenario,
        level=case.level,
        world_size=case.world_size,
        device_kind=device_kind,
        outcome=outcome,
        duration_s=max((float(line.get("duration_s") or 0.0) for line in lines), default=0.0),
        reason=reason,
        known_issue=known_issue_for(spec, case, outcome, findings, error_text(lines), versions, case_issue(lines)),
        findings=tuple(findings),
        device_map=tuple(records),
        ranks=tuple(rank_summary(line) for line in lines),
        notes=notes,
    )


def skipped_case(case: Case, device_kind: str, reason: str) -> CaseResult:
    return CaseResult(
        probe=case.probe, case=case.id, scenario=case.scenario, level=case.level, world_size=case.world_size,
        device_kind=device_kind, outcome=Outcome.SKIP, duration_s=0.0, reason=reason,
    )

"""Merge: one case's rank lines into its case result, with the known-issue verdict."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ds_doctor.checks.hang import stragglers
from ds_doctor.knowledge import catalog
from ds_doctor.knowledge.matching import judged
from ds_doctor.reports.records import CaseResult, Finding, IssueRef, Outcome, RankSummary, Verdict, worst
from ds_doctor.rundir import PlannedCase, RankLine


def rank_summary(line: RankLine) -> RankSummary:
    return RankSummary(
        rank=line.rank,
        outcome=line.outcome.value,
        stage=line.stage,
        reason=line.reason,
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


#: a Python warning as `warnings` prints it (`.../x.py:12: UserWarning: ...`)
WARNING_LINE = re.compile(r"\b\w*Warning: ")


def error_texts(lines: list[RankLine]) -> tuple[str, str]:
    """What the classifier may match, in two tiers: what raised (reasons, tracebacks), then what the ranks printed
    (stderr tails). A printed warning never outranks the exception: on a node with torch alone, torch warns "Failed
    to initialize NumPy" at every import, and every error of such a node read as `torch_numpy_missing`."""
    raised = [
        part for line in lines for part in (line.reason, line.error.traceback if line.error else None) if part
    ]
    printed = "\n".join(line.stderr_tail for line in lines if line.stderr_tail)
    if any(
        line.error and line.error.traceback for line in lines
    ):  # an exception said what it is: warnings are not
        printed = "\n".join(text for text in printed.split("\n") if not WARNING_LINE.search(text))
    return "\n".join(raised), printed


def named_issue(lines: list[RankLine]) -> tuple[str, bool] | None:
    """The known issue a probe named for its case (`ctx.known_issue`), shown if any rank saw it; an id this catalog
    lacks (a line of a newer ds-doctor's run, or a forged one) names none."""
    named = [line for line in lines if catalog.known(line.known_issue)]
    if not named:
        return None
    shown = [line for line in named if line.issue_shown]
    return (shown or named)[0].known_issue or "", bool(shown)


def known_issue_for(
    planned: PlannedCase,
    outcome: Outcome,
    findings: list[Finding],
    texts: tuple[str, str],
    versions: Mapping[str, str | None],
    named: tuple[str, bool] | None = None,
) -> IssueRef | None:
    """An error matched against every known issue; else the issue the probe named for the case, or
    the family's own issue, with its verdict.

    The verdict is `affected` where the failure showed here (a matched error, an issue the probe
    saw, or an error finding from an invariant that detects the issue); a reproduce case that showed
    its trap as designed is `affected` only where the issue's version range holds the installed
    release, else `reproduced` (a fact about the library, not the reader's stack); `not_affected`
    where a reproduce case ran and it did not show; else it follows the installed version. An error or
    timeout that matches no signature, and that the probe did not name, carries no issue: the
    family's issue judged by version beside an unrelated exception would read as its diagnosis
    (seen on a GPU node: deepspeed 0.14.2's ImportError under torch 2.11 tagged with #5538).
    """
    if (
        outcome == Outcome.SKIP and named is None
    ):  # nothing ran: the family's issue would read as a verdict on it
        return None
    if outcome in (Outcome.ERROR, Outcome.TIMEOUT):
        # the one matcher triage uses: a generic message with none of its entry's evidence is `possibly`
        found = judged(texts)
        if found is not None:
            verdict = Verdict.POSSIBLY if found.possibly else Verdict.AFFECTED
            return found.issue.to_ref(verdict, found.confirm, found.kind.value)
        if named is None:
            return None
    if named is not None:
        issue, shown = catalog.get(named[0]), named[1]
    elif planned.known_issues:
        issue = catalog.get(planned.known_issues[0])  # the family's own issue
        shown = any(f.is_error and f.invariant in issue.invariants for f in findings)
    else:
        return None
    if planned.reproduce and outcome == Outcome.XFAIL:
        # a trap shown on purpose concerns this stack only where its version range holds the installed release
        ranged = issue.version_verdict(versions) == Verdict.AFFECTED
        return issue.to_ref(Verdict.AFFECTED if ranged else Verdict.REPRODUCED)
    if shown or outcome == Outcome.XFAIL:
        return issue.to_ref(Verdict.AFFECTED)
    if planned.reproduce and outcome == Outcome.XPASS:
        return issue.to_ref(Verdict.NOT_AFFECTED)
    return issue.to_ref(issue.version_verdict(versions))


def _first_of_each(dicts: list[dict]) -> dict:
    """Keys of every rank's dict, each with the value of the first rank that set it."""
    merged: dict = {}
    for entry in dicts:
        for key, value in entry.items():
            merged.setdefault(key, value)
    return merged


def merge_case(planned: PlannedCase, lines: list[RankLine], versions: Mapping[str, str | None]) -> CaseResult:
    lines = sorted(lines, key=lambda line: line.rank)
    outcome = worst([line.outcome for line in lines])
    findings = [f for line in lines for f in line.findings] + stragglers(
        {line.rank: line.stages for line in lines}
    )
    reason = next((line.reason for line in lines if line.outcome == outcome and line.reason), None)
    return CaseResult(
        probe=planned.probe,
        case=planned.case,
        scenario=planned.scenario,
        level=planned.level,
        world_size=planned.world_size,
        device_kind=planned.device_kind,
        outcome=outcome,
        duration_s=max((line.duration_s for line in lines), default=0.0),
        reason=reason,
        known_issue=known_issue_for(
            planned, outcome, findings, error_texts(lines), versions, named_issue(lines)
        ),
        findings=tuple(findings),
        device_map=tuple(r for line in lines for r in line.device_map),
        ranks=tuple(rank_summary(line) for line in lines),
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

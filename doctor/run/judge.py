"""The one judge: a case's outcome, its reason and its known-issue verdict, from the facts its ranks' lines carry.

A rank writes what happened (`RankLine.ended`: it returned, skipped, raised or called sys.exit; its findings; what
its probe said showed, or showed instead, and the issue it named); the parent writes what it saw of a rank that wrote
nothing (it hung, died, was never seen: `RankLine.lost`). Only here do those facts become pass, fail, error, skip,
timeout, xfail or xpass, as pytest's `makereport` turns a `CallInfo` into a report. A line written before the facts
(an older ds-doctor's run directory) keeps the outcome and reason its rank gave it. No I/O, no process: each branch
is a unit test of milliseconds (tests/run/test_judge.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence

from ds_doctor.knowledge import catalog
from ds_doctor.knowledge.matching import issue_ref, judged
from ds_doctor.reports.model import Finding, IssueRef, Outcome, Verdict, worst
from ds_doctor.rundir import Ended, How, PlannedCase, RankLine

#: a reason is at most this long (the rest is in the findings, the traceback, the log tail)
REASON_CHARS = 2000


@dataclasses.dataclass(frozen=True)
class Judgement:
    """One rank's outcome for a case, and why."""

    outcome: Outcome
    reason: str | None = None


@dataclasses.dataclass(frozen=True)
class CaseJudgement:
    """A case's outcome (its worst rank's), the reason (that rank's), each rank's judgement in the order of the
    lines judged, and the known issue with its verdict."""

    outcome: Outcome
    reason: str | None
    ranks: tuple[Judgement, ...]
    known_issue: IssueRef | None


def reproduced(caught: bool, reproduce: bool, shown: bool = False) -> Outcome:
    """pass/fail from the error findings; for a reproduce case: xfail when the invariants caught it, fail when it
    showed and they did not, xpass when it did not show."""
    if reproduce:
        if caught:
            return Outcome.XFAIL
        return Outcome.FAIL if shown else Outcome.XPASS
    return Outcome.FAIL if caught else Outcome.PASS


def returned(line: RankLine, reproduce: bool) -> Judgement:
    """A case whose probe returned: its error findings, and what it said showed (a reproduce case that named
    another issue instead of its own is judged as a case that reproduces nothing: a `fail` where they caught it)."""
    errors = [f.message for f in line.findings if f.is_error]
    outcome = reproduced(bool(errors), reproduce and not line.instead, bool(line.shown))
    if errors:
        return Judgement(outcome, "; ".join(errors))
    if outcome == Outcome.FAIL:
        return Judgement(outcome, "showed, but no invariant caught it first: " + "; ".join(line.shown))
    return Judgement(outcome)


def _summary(line: RankLine) -> str:
    return line.error.summary if line.error else "an exception"


def _died(line: RankLine, _ended: Ended) -> str:
    how = f"killed by {line.signal}" if line.signal else f"exited with code {line.exit_code}"
    return f"rank {line.rank} {how} in stage {line.stage!r}"


def _timed_out(line: RankLine, ended: Ended) -> str:
    limit = f"{ended.limit_s:g} s" if ended.limit_s is not None else "its limit"
    evidence = f": {ended.said}" if ended.said else ""
    return f"timed out after {limit} on rank {line.rank} in stage {line.stage!r}{evidence}"


def _never_run(_line: RankLine, ended: Ended) -> str:
    return (
        f"not run: the launch across the nodes ended in {ended.said}; ds-doctor does not relaunch across nodes "
        "(every node would have to agree on what is left)"
    )


#: the reason of each way a case ends but returning
REASONS: dict[How, Callable[[RankLine, Ended], str | None]] = {
    How.SKIPPED: lambda _line, ended: ended.said,
    How.RAISED: lambda line, _ended: _summary(line),
    How.EXITED: lambda _line, ended: (
        f"the case's code called sys.exit({ended.said}) (a --model factory, or code it imports)"
    ),
    How.SETUP_FAILED: lambda line, _ended: f"probe setup failed: {_summary(line)}",
    How.TIMED_OUT: _timed_out,
    How.DIED: _died,
    How.NEVER_GATHERED: lambda _line, ended: f"the launch across the nodes never started: {ended.said}",
    How.UNANSWERED: lambda _line, ended: ended.said,
    How.NEVER_RUN: _never_run,
}


def ended_outcome(ended: Ended) -> Outcome:
    """The outcome of a case that did not return: a skip, a timeout (a rank of another node unanswered in a launch
    that timed out too), else an error."""
    if ended.how is How.SKIPPED:
        return Outcome.SKIP
    if ended.how is How.TIMED_OUT or (ended.how is How.UNANSWERED and ended.limit_s is not None):
        return Outcome.TIMEOUT
    return Outcome.ERROR


def rank(line: RankLine, reproduce: bool) -> Judgement:
    """One rank's outcome and reason from its line's facts (`reproduce`: the plan's, never the rank's word); a line
    without them, written by an older ds-doctor, keeps the outcome its rank gave it."""
    ended = line.ended
    if ended is None:
        assert line.outcome is not None, "RankLine holds an outcome or how it ended"
        return Judgement(line.outcome, line.reason)
    if ended.how is How.RETURNED:
        judgement = returned(line, reproduce)
    else:
        judgement = Judgement(ended_outcome(ended), REASONS[ended.how](line, ended))
    reason = judgement.reason
    return dataclasses.replace(judgement, reason=reason[:REASON_CHARS] if reason is not None else None)


#: a Python warning as `warnings` prints it (`.../x.py:12: UserWarning: ...`)
WARNING_LINE = re.compile(r"\b\w*Warning: ")


def error_texts(lines: Sequence[RankLine], ranks: Sequence[Judgement]) -> tuple[str, str]:
    """What the classifier may match, in two tiers: what raised (the ranks' reasons, tracebacks), then what the ranks
    printed (stderr tails). A printed warning never outranks the exception: on a node with torch alone, torch warns
    "Failed to initialize NumPy" at every import, and every error of such a node read as `torch_numpy_missing`."""
    raised = [
        part
        for line, judgement in zip(lines, ranks, strict=True)
        for part in (judgement.reason, line.error.traceback if line.error else None)
        if part
    ]
    printed = "\n".join(line.stderr_tail for line in lines if line.stderr_tail)
    if any(
        line.error and line.error.traceback for line in lines
    ):  # an exception said what it is: warnings are not
        printed = "\n".join(text for text in printed.split("\n") if not WARNING_LINE.search(text))
    return "\n".join(raised), printed


def named_issue(lines: Sequence[RankLine]) -> tuple[str, bool] | None:
    """The known issue a probe named for its case (`ctx.reproduce`), shown if any rank saw it; an id this catalog
    lacks (a line of a newer ds-doctor's run, or a forged one) names none."""
    named = [line for line in lines if catalog.known(line.known_issue)]
    if not named:
        return None
    shown = [line for line in named if line.issue_shown]
    return (shown or named)[0].known_issue or "", bool(shown)


def known_issue_for(
    planned: PlannedCase,
    outcome: Outcome,
    findings: Sequence[Finding],
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
            return issue_ref(found)
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


#: the reason of a case the run stopped before every rank reported it (`ds-doctor report RUN_DIR` of a stopped run)
UNFINISHED = "not run: the run stopped before every rank of this case reported it"


def unfinished(planned: PlannedCase, lines: Sequence[RankLine | None]) -> CaseJudgement:
    """A case whose ranks did not all report (`lines`: by rank, None where none came): `not_run`, which says
    nothing of the stack, each rank that reported judged as it reported, and no known issue."""
    ranks = tuple(
        rank(line, planned.reproduce) if line is not None else Judgement(Outcome.NOT_RUN, UNFINISHED)
        for line in lines
    )
    return CaseJudgement(Outcome.NOT_RUN, UNFINISHED, ranks, None)


def case(
    planned: PlannedCase,
    lines: Sequence[RankLine],
    findings: Sequence[Finding],
    versions: Mapping[str, str | None],
) -> CaseJudgement:
    """A case from its ranks' lines: each rank judged, the worst rank's outcome with its reason, and the known issue
    (`findings`: every rank's, with what the parent found across them)."""
    ranks = tuple(rank(line, planned.reproduce) for line in lines)
    outcome = worst([judgement.outcome for judgement in ranks])
    reason = next((j.reason for j in ranks if j.outcome == outcome and j.reason), None)
    issue = known_issue_for(
        planned, outcome, findings, error_texts(lines, ranks), versions, named_issue(lines)
    )
    return CaseJudgement(outcome, reason, ranks, issue)

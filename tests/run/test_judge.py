"""The one judge (`ds_doctor.run.judge`): every outcome from the facts a rank line carries, the reproduce matrix with
its known-issue verdicts, the lines the parent writes for ranks it lost, and a line written before the facts. No
process, no registry: milliseconds."""

from __future__ import annotations

from typing import Any

import pytest

from ds_doctor.reports.model import ErrorInfo, Finding, Outcome, Severity, Verdict
from ds_doctor.run import judge
from ds_doctor.rundir import Ended, How, PlannedCase, RankLine

VERSIONS = {"deepspeed": "0.19.8", "accelerate": "1.15.0", "torch": "2.13.0"}
OWN = "ds_frozen_param_not_in_param_names"  # the case's own issue; its invariant is param_name_map
OTHER = "ds_z3_param_not_available_on_fetch"
CAUGHT = Finding("param_name_map", Severity.ERROR, "emb.weight is not a key of engine.param_names", rank=0)
WARNED = Finding("param_name_map", Severity.WARNING, "emb.weight is stale (latent)", rank=0)
SHOWED = "save_checkpoint raised ValueError: failed to find frozen emb.weight"


def planned(reproduce: bool, known_issues: tuple[str, ...] = (OWN,), world_size: int = 1) -> PlannedCase:
    variant = "z2-set-tensor" if reproduce else "z2-healthy"
    return PlannedCase(
        f"frozen_param_names[{variant}-ws{world_size}]",
        "frozen_param_names",
        "S1",
        variant,
        world_size,
        3,
        reproduce,
        "cpu",
        known_issues,
    )


def returned(rank: int = 0, **facts: Any) -> RankLine:
    """A rank's line of a case whose probe returned."""
    return RankLine("c[x-ws2]", rank, 2, stage="step", ended=Ended(How.RETURNED), **facts)


def ended(how: How, rank: int = 0, **facts: Any) -> RankLine:
    said = facts.pop("said", None)
    limit = facts.pop("limit_s", None)
    return RankLine("c[x-ws2]", rank, 2, stage="step", ended=Ended(how, said, limit), **facts)


def old(outcome: Outcome, reason: str | None = None, **fields: Any) -> RankLine:
    """A line written before the facts: its rank's outcome and reason."""
    return RankLine("c[x-ws2]", 0, 2, outcome, reason, "step", **fields)


ERROR = ErrorInfo("ValueError", "planted", "Traceback (most recent call last):\nValueError: planted")


@pytest.mark.parametrize(
    ("line", "reproduce", "outcome", "reason"),
    [
        (returned(), False, Outcome.PASS, None),
        (returned(findings=(WARNED,)), False, Outcome.PASS, None),  # a warning fails nothing
        (returned(findings=(CAUGHT, CAUGHT)), False, Outcome.FAIL, f"{CAUGHT.message}; {CAUGHT.message}"),
        (returned(shown=(SHOWED,)), False, Outcome.PASS, None),  # what showed counts for reproduce cases only
        (ended(How.SKIPPED, said="pip install prodigyopt"), False, Outcome.SKIP, "pip install prodigyopt"),
        (ended(How.RAISED, error=ERROR), True, Outcome.ERROR, "ValueError: planted"),
        (
            ended(How.EXITED, said="3", exit_code=3),
            False,
            Outcome.ERROR,
            "the case's code called sys.exit(3) (a --model factory, or code it imports)",
        ),
        (
            ended(How.SETUP_FAILED, error=ERROR),
            False,
            Outcome.ERROR,
            "probe setup failed: ValueError: planted",
        ),
        (
            ended(How.TIMED_OUT, limit_s=30.0, said="rank 1 never joined all_reduce #7"),
            False,
            Outcome.TIMEOUT,
            "timed out after 30 s on rank 0 in stage 'step': rank 1 never joined all_reduce #7",
        ),
        (
            ended(How.DIED, signal="SIGKILL", exit_code=-9),
            False,
            Outcome.ERROR,
            "rank 0 killed by SIGKILL in stage 'step'",
        ),
        (ended(How.DIED, exit_code=1), False, Outcome.ERROR, "rank 0 exited with code 1 in stage 'step'"),
        (
            ended(How.NEVER_GATHERED, said="torchrun's rendezvous at h:29500 did not gather all 2 nodes"),
            False,
            Outcome.ERROR,
            "the launch across the nodes never started: torchrun's rendezvous at h:29500 did not gather all 2 nodes",
        ),
        (
            ended(How.UNANSWERED, said="rank 0 on node 1 stopped answering"),
            False,
            Outcome.ERROR,
            "rank 0 on node 1 stopped answering",
        ),
        (
            ended(How.UNANSWERED, said="rank 0 on node 1 stopped answering", limit_s=60.0),
            False,
            Outcome.TIMEOUT,
            "rank 0 on node 1 stopped answering",
        ),
        (
            ended(How.NEVER_RUN, said="a[x-ws4-n2]"),
            False,
            Outcome.ERROR,
            "not run: the launch across the nodes ended in a[x-ws4-n2]; ds-doctor does not relaunch across nodes "
            "(every node would have to agree on what is left)",
        ),
    ],
)
def test_every_way_a_case_ends_has_its_outcome_and_reason(
    line: RankLine, reproduce: bool, outcome: Outcome, reason: str | None
) -> None:
    assert judge.rank(line, reproduce) == judge.Judgement(outcome, reason)
    assert RankLine.from_json(line.to_json()) == line  # the facts travel through the rank's file


def test_a_reason_is_bounded() -> None:
    long = Finding("param_name_map", Severity.ERROR, "x" * 5000)
    assert len(judge.rank(returned(findings=(long,)), False).reason or "") == judge.REASON_CHARS


# the reproduce protocol: (the invariants caught it, it showed for real, it named another issue instead)
@pytest.mark.parametrize(
    ("caught", "showed", "outcome"),
    [
        (True, True, Outcome.XFAIL),  # it showed and the invariants had caught it
        (True, False, Outcome.XFAIL),
        (False, True, Outcome.FAIL),  # it showed and no invariant caught it: the doctor missed it
        (False, False, Outcome.XPASS),  # nothing showed: this stack is not affected
    ],
)
def test_the_reproduce_matrix(caught: bool, showed: bool, outcome: Outcome) -> None:
    assert judge.reproduced(caught, True, showed) == outcome
    line = returned(findings=(CAUGHT,) if caught else (), shown=(SHOWED,) if showed else ())
    judged = judge.rank(line, reproduce=True)
    assert judged.outcome == outcome
    if outcome == Outcome.FAIL:
        assert judged.reason == f"showed, but no invariant caught it first: {SHOWED}"
    assert judge.rank(line, reproduce=False).outcome == (Outcome.FAIL if caught else Outcome.PASS)


@pytest.mark.parametrize(
    ("caught", "showed", "outcome", "verdict"),
    [
        (
            True,
            True,
            Outcome.XFAIL,
            Verdict.REPRODUCED,
        ),  # on purpose, outside any version range: the library's
        (False, True, Outcome.FAIL, Verdict.AFFECTED),  # shown and not caught: a real failure here
        (False, False, Outcome.XPASS, Verdict.NOT_AFFECTED),
    ],
)
def test_a_reproduce_case_s_verdict_follows_what_showed(
    caught: bool, showed: bool, outcome: Outcome, verdict: Verdict
) -> None:
    lines = [
        returned(
            rank,
            findings=(CAUGHT,) if caught and rank else (),
            shown=(SHOWED,) if showed and rank else (),
            known_issue=OWN,
            issue_shown=(caught or showed) and bool(rank),
        )
        for rank in (0, 1)
    ]
    findings = [f for line in lines for f in line.findings]
    judged = judge.case(planned(True, world_size=2), lines, findings, VERSIONS)
    assert judged.outcome == outcome and judged.known_issue is not None
    assert (judged.known_issue.id, judged.known_issue.verdict) == (OWN, verdict)
    # rank 0 saw nothing of it: the case takes its worst rank's outcome
    assert [j.outcome for j in judged.ranks] == [Outcome.XPASS, outcome]


@pytest.mark.parametrize(
    ("deepspeed", "verdict"), [("0.17.0", Verdict.AFFECTED), ("0.19.8", Verdict.REPRODUCED)]
)
def test_a_trap_caught_on_purpose_concerns_this_stack_inside_its_version_range(
    deepspeed: str, verdict: Verdict
) -> None:
    issue = "ds_z3_ds_grads_remaining_attr_missing"  # >=0.16.5,<0.19.3
    found = Finding("zero3_hooks_own_state", Severity.ERROR, "borrowed hook state", rank=0)
    line = returned(findings=(found,), known_issue=issue, issue_shown=True)
    judged = judge.case(planned(True, (issue,)), [line], [found], {**VERSIONS, "deepspeed": deepspeed})
    assert judged.outcome == Outcome.XFAIL and judged.known_issue is not None
    assert judged.known_issue.verdict == verdict


def test_another_issue_showing_instead_is_a_fail_naming_it_never_an_xfail_of_its_own() -> None:
    """`make verify-catalog` would record an xfail as the case's own issue reproduced."""
    named = returned(findings=(CAUGHT,), known_issue=OTHER, issue_shown=True, instead=True)
    judged = judge.case(planned(True), [named], [CAUGHT], VERSIONS)
    assert (judged.outcome, judged.reason) == (Outcome.FAIL, CAUGHT.message)
    assert judged.known_issue is not None
    assert (judged.known_issue.id, judged.known_issue.verdict) == (OTHER, Verdict.AFFECTED)
    # nothing in the catalog explains it: a fail that names no issue of its own (the family's, caught, is affected)
    unnamed = returned(findings=(CAUGHT,), instead=True)
    judged = judge.case(planned(True), [unnamed], [CAUGHT], VERSIONS)
    assert judged.outcome == Outcome.FAIL and judged.known_issue is not None
    assert (judged.known_issue.id, judged.known_issue.verdict) == (OWN, Verdict.AFFECTED)
    # another issue named although nothing was caught: no reproduction, and nothing failed either
    assert (
        judge.rank(returned(known_issue=OTHER, issue_shown=True, instead=True), True).outcome == Outcome.PASS
    )


def test_an_issue_named_on_an_ordinary_case_is_judged_by_what_showed() -> None:
    """A case that reproduces nothing on purpose may still name the issue it is about (optimizer_state_placement)."""
    quiet = judge.case(planned(False), [returned(known_issue=OWN)], [], VERSIONS)
    assert quiet.outcome == Outcome.PASS and quiet.known_issue is not None
    assert quiet.known_issue.verdict == Verdict.UNKNOWN  # by version: the catalog gives no range here
    caught = judge.case(
        planned(False), [returned(findings=(CAUGHT,), known_issue=OWN, issue_shown=True)], [CAUGHT], VERSIONS
    )
    assert caught.outcome == Outcome.FAIL and caught.known_issue is not None
    assert caught.known_issue.verdict == Verdict.AFFECTED


@pytest.mark.parametrize(
    ("printed", "verdict"),
    [
        (
            "",
            Verdict.POSSIBLY,
        ),  # a SIGKILL alone names no OOM: torchrun's agent kills ranks left after a failure
        ("\n[ 812.4] Out of memory: Killed process 12 (python) total-vm:81920000kB", Verdict.AFFECTED),
    ],
)
def test_a_rank_killed_by_sigkill_is_possibly_the_oom_killer_until_its_line_is_there(
    printed: str, verdict: Verdict
) -> None:
    died = RankLine.lost(
        "c[x-ws2]",
        1,
        2,
        Ended(How.DIED),
        "train",
        exit_code=-9,
        signal="SIGKILL",
        stderr_tail="exitcode  : -9 (pid: 12)" + printed,
    )
    judged = judge.case(planned(False, world_size=2), [returned(0), died], [], VERSIONS)
    assert (judged.outcome, judged.reason) == (Outcome.ERROR, "rank 1 killed by SIGKILL in stage 'train'")
    assert judged.known_issue is not None
    assert (judged.known_issue.id, judged.known_issue.verdict) == ("torchrun_child_sigkill", verdict)


def test_a_timeout_keeps_the_stage_each_rank_reached() -> None:
    hung = [
        RankLine.lost(
            "c[x-ws2]", rank, 2, Ended(How.TIMED_OUT, limit_s=6.0), stage, duration_s=6.0, stderr_tail=""
        )
        for rank, stage in ((0, "all_reduce #7"), (1, "setup: load CPUAdamBuilder"))
    ]
    judged = judge.case(planned(False, world_size=2), hung, [], VERSIONS)
    assert judged.outcome == Outcome.TIMEOUT
    assert [j.reason for j in judged.ranks] == [
        "timed out after 6 s on rank 0 in stage 'all_reduce #7'",
        "timed out after 6 s on rank 1 in stage 'setup: load CPUAdamBuilder'",
    ]
    assert judged.reason == judged.ranks[0].reason and [line.stage for line in hung] == [
        "all_reduce #7",
        "setup: load CPUAdamBuilder",
    ]


def test_the_parent_writes_only_what_it_saw_of_a_lost_rank() -> None:
    with pytest.raises(ValueError, match="said by the rank itself"):
        RankLine.lost("c[x-ws2]", 0, 2, Ended(How.RETURNED), "step")
    with pytest.raises(ValueError, match="neither how it ended nor its outcome"):
        RankLine("c[x-ws2]", 0, 2)


@pytest.mark.parametrize(
    "ended",
    [
        '{"how": "exploded"}',
        '"returned"',
        '{"how": "returned", "said": 3}',
        '{"how": "timed out", "limit_s": "x"}',
    ],
)
def test_a_line_whose_facts_do_not_read_is_refused(ended: str) -> None:
    text = f'{{"case": "c[x-ws2]", "rank": 0, "world_size": 2, "outcome": null, "ended": {ended}}}'
    with pytest.raises(ValueError):
        RankLine.from_json(text)


def test_a_line_written_before_the_facts_keeps_the_outcome_its_rank_gave() -> None:
    """`ds-doctor report RUN_DIR` of an older ds-doctor's run: its lines have no facts, and are judged as before."""
    for outcome in Outcome:
        assert judge.rank(old(outcome, "as the rank said"), reproduce=True) == judge.Judgement(
            outcome, "as the rank said"
        )
    # facts the judge would have read otherwise are not second-guessed on such a line
    xfail = old(Outcome.XFAIL, known_issue=OWN, issue_shown=True)
    judged = judge.case(planned(True), [xfail], [], VERSIONS)
    assert judged.outcome == Outcome.XFAIL and judged.known_issue is not None
    assert judged.known_issue.verdict == Verdict.REPRODUCED


def test_where_the_facts_are_the_judge_never_takes_the_rank_s_word() -> None:
    forged = RankLine("c[x-ws2]", 0, 2, Outcome.PASS, ended=Ended(How.RETURNED), findings=(CAUGHT,))
    assert judge.rank(forged, reproduce=False) == judge.Judgement(Outcome.FAIL, CAUGHT.message)
    assert (
        judge.rank(forged, reproduce=True).outcome == Outcome.XFAIL
    )  # the plan says reproduce, not the rank


def test_a_case_the_run_stopped_before_every_rank_reported_is_not_run() -> None:
    judged = judge.unfinished(planned(False, world_size=2), [returned(0, findings=(CAUGHT,)), None])
    assert (judged.outcome, judged.reason, judged.known_issue) == (Outcome.NOT_RUN, judge.UNFINISHED, None)
    assert judged.ranks == (
        judge.Judgement(Outcome.FAIL, CAUGHT.message),
        judge.Judgement(Outcome.NOT_RUN, judge.UNFINISHED),
    )


def test_what_raised_is_classified_from_the_judged_reasons() -> None:
    """The classifier reads the judge's reasons (a rank line holds facts, not words): a rank killed by SIGKILL is
    matched from the reason the judge gives it."""
    died = ended(How.DIED, signal="SIGKILL", exit_code=-9)
    ranks = [judge.rank(died, False)]
    raised, printed = judge.error_texts([died], ranks)
    assert raised == "rank 0 killed by SIGKILL in stage 'step'" and printed == ""

"""The worker's side of a case: how a rank's outcome follows from findings and what showed, and the line it
writes for each way a case can end (returned, skipped, raised, setup failed)."""

from __future__ import annotations

import pytest

from ds_doctor.plugins import ProbeContext
from ds_doctor.probe.registry import find_case
from ds_doctor.reports.records import ErrorInfo, Finding, Outcome, Severity
from ds_doctor.run.worker import rank_outcome, run_case, setup_failure_line
from ds_doctor.rundir import RankLine

CASE = "frozen_param_names[z2-set-tensor-ws1]"


# caught; a probe that does not call showed() keeps the old meaning
@pytest.mark.parametrize(
    ("caught", "reproduce", "shown", "outcome"),
    [
        (False, False, False, Outcome.PASS),
        (True, False, False, Outcome.FAIL),
        (True, True, True, Outcome.XFAIL),  # it showed and the invariants had caught it
        (True, True, False, Outcome.XFAIL),
        (False, True, True, Outcome.FAIL),  # it showed and no invariant caught it: the doctor missed it
        (False, True, False, Outcome.XPASS),  # nothing showed: this stack is not affected
    ],
)
def test_rank_outcome(caught: bool, reproduce: bool, shown: bool, outcome: Outcome) -> None:
    assert rank_outcome(caught, reproduce, shown) == outcome


class Plays:
    """A probe stand-in whose run() plays one path of a reproduce case."""

    def __init__(
        self,
        catch: bool = False,
        show: bool = False,
        raises: Exception | None = None,
        skip: str | None = None,
        instead: str | None = None,
    ) -> None:
        self.catch, self.show, self.raises, self.skip, self.instead = catch, show, raises, skip, instead

    def run(self, ctx: ProbeContext) -> None:
        ctx.enter("playing")
        ctx.measure("tflops", 1.5)
        if self.skip:
            ctx.skip(self.skip)
        if self.catch:
            ctx.check(
                [Finding("param_name_map", Severity.ERROR, "emb.weight is not a key of engine.param_names")]
            )
        if self.show:
            ctx.showed("save_checkpoint raised ValueError: failed to find frozen ...")
        if self.raises:
            raise self.raises
        if self.instead is not None:
            ctx.showed_instead(self.instead or None)
            return
        ctx.known_issue("ds_frozen_param_not_in_param_names", shown=self.show)


def context(rank: int = 0) -> ProbeContext:
    case = find_case(CASE)
    return ProbeContext(
        case_id=case.id,
        params=case.params,
        rank=rank,
        world_size=1,
        local_rank=0,
        device="cpu",
        backend="gloo",
    )


def played(probe: Plays) -> RankLine:
    line = run_case(probe, context(), find_case(CASE).reproduce)
    assert RankLine.from_json(line.to_json()) == line  # what the parent reads back is what the rank wrote
    return line


def test_a_caught_and_shown_case_is_an_xfail_with_its_findings_and_issue() -> None:
    line = played(Plays(catch=True, show=True))
    assert (line.outcome, line.stage, line.known_issue, line.issue_shown) == (
        Outcome.XFAIL,
        "playing",
        "ds_frozen_param_not_in_param_names",
        True,
    )
    assert line.reason == "emb.weight is not a key of engine.param_names" and line.measures == {"tflops": 1.5}
    assert [f.rank for f in line.findings] == [0]  # stamped with the rank that found it


def test_another_known_issue_caught_by_a_reproduce_case_is_a_fail_naming_it() -> None:
    """Never an xfail of the case's own issue: make verify-catalog would record that issue as reproduced."""
    line = played(Plays(catch=True, instead="ds_z3_param_not_available_on_fetch"))
    assert (line.outcome, line.known_issue, line.issue_shown) == (
        Outcome.FAIL,
        "ds_z3_param_not_available_on_fetch",
        True,
    )
    assert line.reason == "emb.weight is not a key of engine.param_names"
    unexplained = played(Plays(catch=True, instead=""))  # nothing in the catalog fits: a fail naming no issue
    assert (unexplained.outcome, unexplained.known_issue) == (Outcome.FAIL, None)


def test_shown_but_not_caught_is_a_fail_that_says_so() -> None:
    line = played(Plays(show=True))
    assert line.outcome == Outcome.FAIL
    assert line.reason.startswith("showed, but no invariant caught it first: save_checkpoint raised")


def test_a_raise_is_an_error_with_its_traceback_and_a_skip_keeps_its_reason() -> None:
    raised = played(Plays(raises=ValueError("planted")))
    assert (raised.outcome, raised.reason, raised.error.type) == (
        Outcome.ERROR,
        "ValueError: planted",
        "ValueError",
    )
    assert "Traceback" in raised.error.traceback and raised.stage == "playing"
    skipped = played(Plays(skip="pip install something"))
    assert (skipped.outcome, skipped.reason) == (Outcome.SKIP, "pip install something")


def test_a_failed_setup_fails_the_case_with_the_setup_error() -> None:
    try:
        raise RuntimeError("ninja is missing")
    except RuntimeError as exc:
        failure = ErrorInfo.of(exc)
    line = setup_failure_line(context(), failure)
    assert (line.outcome, line.stage, line.reason) == (
        Outcome.ERROR,
        "setup",
        "probe setup failed: RuntimeError: ninja is missing",
    )


def test_an_unknown_measure_is_refused() -> None:
    with pytest.raises(KeyError, match="unknown measure 'speed'"):
        context().measure("speed", 1.0)

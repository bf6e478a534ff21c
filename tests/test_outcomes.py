"""How a rank's outcome and a case's known-issue verdict follow from findings and what showed."""

from __future__ import annotations

import pytest

from doctor import known_issues
from doctor.context import ProbeContext
from doctor.invariants import ERROR, Finding
from doctor.outcomes import Outcome
from doctor.results import merge_case
from doctor.worker import rank_outcome, run_case
from probes import find_case, get

VERSIONS = {"deepspeed": "0.19.8", "accelerate": "1.15.0", "torch": "2.13.0"}


@pytest.mark.parametrize(("caught", "reproduce", "shown", "outcome"), [
    (False, False, False, Outcome.PASS),
    (True, False, False, Outcome.FAIL),
    (True, True, True, Outcome.XFAIL),  # it showed and the invariants had caught it
    (True, True, False, Outcome.XFAIL),  # caught; a probe that does not call showed() keeps the old meaning
    (False, True, True, Outcome.FAIL),  # it showed and no invariant caught it: the doctor missed it
    (False, True, False, Outcome.XPASS),  # nothing showed: this stack is not affected
])
def test_rank_outcome(caught: bool, reproduce: bool, shown: bool, outcome: Outcome) -> None:
    assert rank_outcome(caught, reproduce, shown) == outcome


class _Probe:
    """A probe module stand-in whose run() plays one of the paths of a reproduce case."""

    def __init__(self, catch: bool, show: bool) -> None:
        self.catch, self.show = catch, show

    def run(self, ctx: ProbeContext) -> None:
        if self.catch:
            ctx.check([Finding("param_name_map", ERROR, "emb.weight is not a key of engine.param_names")])
        if self.show:
            ctx.showed("save_checkpoint raised ValueError: failed to find frozen ...")
        ctx.known_issue("ds_frozen_param_not_in_param_names", shown=self.show)


def _lines(catch: bool, show: bool) -> list[dict]:
    case = find_case("frozen_param_names[z2-set-tensor-ws1]")
    ctx = ProbeContext(case_id=case.id, params=case.params, rank=0, world_size=1, local_rank=0, device="cpu",
                       backend="gloo")
    return [run_case(_Probe(catch, show), ctx, case.reproduce)]


@pytest.mark.parametrize(("catch", "show", "outcome", "verdict"), [
    (True, True, "xfail", known_issues.AFFECTED),
    (False, True, "fail", known_issues.AFFECTED),
    (False, False, "xpass", known_issues.NOT_AFFECTED),
])
def test_a_reproduce_case_end_to_end_through_the_worker_and_the_merge(catch: bool, show: bool, outcome: str,
                                                                      verdict: str) -> None:
    case = find_case("frozen_param_names[z2-set-tensor-ws1]")
    lines = _lines(catch, show)
    assert lines[0]["outcome"] == outcome
    if outcome == "fail":
        assert lines[0]["reason"].startswith("showed, but no invariant caught it first: save_checkpoint raised")
    result = merge_case(case, get(case.probe).SPEC, lines, "cpu", VERSIONS)
    assert result.outcome.value == outcome
    assert result.known_issue is not None and result.known_issue["id"] == "ds_frozen_param_not_in_param_names"
    assert result.known_issue["verdict"] == verdict
    assert result.notes.get("showed", []) == (["save_checkpoint raised ValueError: failed to find frozen ..."]
                                              if show else [])

"""Who is blamed when a launch ends early, each branch without a process: setup vs case vs launch, one node vs
across nodes, timed out vs crashed, and the bound on relaunches."""

from __future__ import annotations

import pytest

from ds_doctor.probe.spec import Case
from ds_doctor.run.attribution import (
    Cause,
    Ending,
    RelaunchError,
    attribute,
    culprit,
    remaining,
    stage_of,
    victims,
)
from ds_doctor.rundir import LAUNCH, Beat, setup_name

A1, A2 = Case("alpha", "S2", "one", 2, 2), Case("alpha", "S2", "two", 2, 3)
B1 = Case("beta", "S1", "one", 2, 2)
CASES = (A1, A2, B1)


def beats(*where: tuple[int, str, str]) -> dict[int, Beat]:
    return {rank: Beat(rank, case, stage, 0.0, 1.0) for rank, case, stage in where}


def test_a_crash_inside_a_case_blames_that_case_alone_and_the_rest_rerun() -> None:
    ending = Ending(None, beats((0, A2.id, "step"), (1, A2.id, "backward")))
    blamed, causes = attribute(CASES[1:], {}, ending, across_nodes=False)
    assert blamed == A2.id and list(causes) == [A2.id]
    assert causes[A2.id] == {0: Cause.CRASHED, 1: Cause.CRASHED}
    assert remaining(CASES[1:], causes, attempt=1, bound=3) == [B1]


def test_a_timeout_blames_the_case_that_overran_and_keeps_the_line_a_rank_already_wrote() -> None:
    ending = Ending(A1.id, beats((0, A1.id, "finished"), (1, A1.id, "all_reduce")))
    blamed, causes = attribute(CASES, {A1.id: {0}}, ending, across_nodes=False)
    assert blamed == A1.id and causes == {A1.id: {0: Cause.FINISHED, 1: Cause.TIMED_OUT}}


def test_a_failed_setup_takes_every_case_of_its_probe_and_no_other() -> None:
    ending = Ending(None, beats((0, setup_name("alpha"), "setup"), (1, setup_name("alpha"), "setup")))
    assert culprit(ending, CASES) == setup_name("alpha")
    assert victims(setup_name("alpha"), CASES, across_nodes=False) == [A1, A2]
    _, causes = attribute(CASES, {}, ending, across_nodes=False)
    assert set(causes) == {A1.id, A2.id} and all(
        c is Cause.CRASHED for r in causes.values() for c in r.values()
    )


def test_a_launch_that_never_reached_a_case_takes_everything_unfinished() -> None:
    assert culprit(Ending(None, {}), CASES) is None and victims(None, CASES, across_nodes=False) == list(
        CASES
    )
    assert victims(LAUNCH, CASES, across_nodes=False) == list(CASES)
    _, causes = attribute(
        CASES, {}, Ending(LAUNCH, beats((0, LAUNCH, "init_process_group"))), across_nodes=False
    )
    assert causes[B1.id] == {0: Cause.TIMED_OUT, 1: Cause.TIMED_OUT}


def test_the_first_unfinished_case_in_launch_order_is_the_culprit_when_ranks_disagree() -> None:
    ending = Ending(None, beats((0, B1.id, "start"), (1, A2.id, "step")))  # rank 0 went on; rank 1 died in A2
    assert culprit(ending, [A2, B1]) == A2.id


def test_across_nodes_nothing_reruns_and_each_rank_is_named_by_what_this_node_saw() -> None:
    ending = Ending(A1.id, beats((0, A1.id, "step")))  # rank 1 is on another node: no beat here
    blamed, causes = attribute(CASES, {}, ending, across_nodes=True)
    assert blamed == A1.id and set(causes) == {A1.id, A2.id, B1.id}
    assert causes[A1.id] == {0: Cause.TIMED_OUT, 1: Cause.REMOTE}
    assert causes[A2.id] == causes[B1.id] == {0: Cause.NOT_RUN, 1: Cause.NOT_RUN}
    _, gathered_nobody = attribute(CASES, {}, Ending(None, {}), across_nodes=True)
    assert set(gathered_nobody) == {A1.id, A2.id, B1.id}
    assert gathered_nobody[A1.id] == {0: Cause.NOT_RUN, 1: Cause.NOT_RUN}  # no culprit: none of them ran
    assert attribute([A1], {}, Ending(A1.id, {}), across_nodes=True)[1][A1.id][0] is Cause.NEVER_GATHERED


def test_the_stage_a_rank_reached_is_its_own_case_s_setup_s_or_the_launch_s() -> None:
    assert stage_of(A1, Beat(0, A1.id, "step", 0, 0)) == "step"
    assert stage_of(A1, Beat(0, setup_name("alpha"), "building ops", 0, 0)) == "setup: building ops"
    assert stage_of(A1, Beat(0, LAUNCH, "init_process_group", 0, 0)) == "init_process_group"
    assert stage_of(A1, Beat(0, B1.id, "step", 0, 0)) == "not started"
    assert stage_of(A1, None) == "not started"


def test_relaunches_are_bounded_an_attempt_that_settles_nothing_is_said() -> None:
    assert remaining(CASES, {A1.id, A2.id, B1.id}, attempt=1, bound=3) == []
    with pytest.raises(RelaunchError, match="settled none of 3 cases"):
        remaining(CASES, set(), attempt=1, bound=3)
    with pytest.raises(RelaunchError, match="attempt 3 of at most 3"):
        remaining([A2, B1], {A2.id}, attempt=3, bound=3)

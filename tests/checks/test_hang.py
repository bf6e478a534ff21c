"""The straggler rule: the rank the others waited for, not the ranks that waited."""

from __future__ import annotations

from ds_doctor.checks.hang import JUDGED, STRAGGLER_FACTOR, stragglers
from ds_doctor.reports.hang import StageKind, StageTime, stages_from


def stages(*rows: tuple[str, float, float]) -> list[StageTime]:
    return [StageTime(*row) for row in rows]


def test_the_slow_rank_is_named_and_the_rank_waiting_for_it_is_not() -> None:
    # rank 1 computes for 2 s; rank 0 then waits 2 s for it in the sync stage and leaves it with rank 1
    found = stragglers(
        {
            0: stages(("compute", 0.0, 0.01), ("sync", 0.01, 2.0)),
            1: stages(("compute", 0.0, 2.0), ("sync", 2.0, 0.01)),
        }
    )
    assert [(f.invariant, f.rank, f.stage, f.severity.value) for f in found] == [
        ("straggler", 1, "compute", "warning")
    ]
    assert "waited 1.99 s" in found[0].message


def test_short_stages_and_even_ranks_are_not_stragglers() -> None:
    # 5x slower but only 40 ms later: jitter, not a straggler
    assert stragglers({0: stages(("step", 0.0, 0.01)), 1: stages(("step", 0.0, 0.05))}) == []
    # over the floor but under the factor against the median of the others
    even = {r: stages(("step", 0.0, 1.0 + 0.1 * r)) for r in range(4)}
    assert stragglers(even) == []
    assert STRAGGLER_FACTOR == 3.0


def test_the_median_of_the_others_decides_with_more_ranks() -> None:
    ranks = {r: stages(("load", 0.0, 0.3)) for r in range(7)}
    ranks[5] = stages(("load", 0.0, 1.5))
    assert [f.rank for f in stragglers(ranks)] == [5]


def test_only_a_cases_own_stages_are_judged() -> None:
    """Issue 45, a healthy level 2: rank 1 built DeepSpeed's shm comm while rank 0 waited on its lock, and read as a
    straggler. A setup's stages are ds-doctor's scaffolding; the same times at a case's own stage are a straggler."""
    assert JUDGED == {StageKind.CASE}
    times = {0: (-6.0, 0.2), 1: (-6.0, 6.0)}  # (start, seconds) of "build ShareMemCommBuilder"
    setup = {r: [StageTime("build ShareMemCommBuilder", *t, StageKind.SETUP)] for r, t in times.items()}
    assert stragglers(setup) == []
    own = {r: [StageTime("build ShareMemCommBuilder", *t)] for r, t in times.items()}
    assert [f.rank for f in stragglers(own)] == [1]


def test_stages_from_a_report_before_the_kinds_are_the_cases() -> None:
    read = stages_from([{"stage": "step", "start_s": 0.0, "duration_s": 1.0}])
    assert read == (StageTime("step", 0.0, 1.0, StageKind.CASE),)
    assert stages_from([{"stage": "setup", "start_s": -1.0, "duration_s": 1.0, "kind": "setup"}])[0].kind == (
        StageKind.SETUP
    )


def test_a_rank_that_started_the_case_early_waits_and_is_no_straggler() -> None:
    """Issue 45, a healthy level 2 (zero_offload[z3-opt+param-bf16-ws2], these times): rank 0 loaded DeepSpeed's
    fused Adam 0.72 s longer, so rank 1 started the case that much earlier and waited for rank 0 in initialize. Since
    its own start rank 1 left every stage 0.84 s later, and 7 ms against 2 ms at the last stage read as a straggler;
    on the ranks' clocks both left together, and milliseconds are no stage's straggling."""
    rows = {  # (stage, since the rank's case start, seconds)
        0: [("before_init", 0.0065, 4.124), ("micro_step 3", 4.1965, 0.0165), ("after_step", 4.213, 0.0023)],
        1: [("before_init", 0.0054, 4.9632), ("micro_step 3", 5.0375, 0.0165), ("after_step", 5.054, 0.0071)],
    }
    started = {0: 1000.0, 1: 1000.0 - 0.8387}  # when each rank's case started, on the node's clock
    timed = {r: [StageTime(*t, at=started[r] + t[1]) for t in row] for r, row in rows.items()}
    assert stragglers(timed) == []
    # a report from before `at`: the same stages judged since each rank's start, where only a floor on the time
    # spent there keeps 7 ms from being a straggler's
    assert stragglers({r: [StageTime(*row) for row in rows[r]] for r in rows}) == []

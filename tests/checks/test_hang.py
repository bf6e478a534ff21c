"""The straggler rule: the rank the others waited for, not the ranks that waited."""

from __future__ import annotations

from ds_doctor.checks.hang import STRAGGLER_FACTOR, stragglers
from ds_doctor.reports.hang import StageTime


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

"""The pairwise fabric stage's schedule and its suspect rule, as pure functions."""

from __future__ import annotations

import itertools

import pytest

from ds_doctor.checks.fabric import ALL_PAIRS_UP_TO, fabric_findings, rounds, suspects


@pytest.mark.parametrize("nodes", [2, 3, 4, 5, 8])
def test_every_pair_once_in_disjoint_rounds(nodes: int) -> None:
    schedule = rounds(nodes)
    pairs = [p for r in schedule for p in r]
    assert sorted(pairs) == list(itertools.combinations(range(nodes), 2))
    assert len(schedule) == (nodes - 1 if nodes % 2 == 0 else nodes)
    for round_ in schedule:
        members = [n for p in round_ for n in p]
        assert len(members) == len(set(members))  # a node in at most one pair per round


@pytest.mark.parametrize(("nodes", "how_many"), [(ALL_PAIRS_UP_TO + 2, 2), (ALL_PAIRS_UP_TO + 3, 3), (64, 2)])
def test_a_large_cluster_measures_a_ring_of_pairs(nodes: int, how_many: int) -> None:
    schedule = rounds(nodes)
    pairs = {p for r in schedule for p in r}
    assert len(schedule) == how_many and len(pairs) == nodes
    assert all(sum(n in p for p in pairs) == 2 for n in range(nodes))


def test_the_node_all_of_whose_pairs_are_slow_is_named() -> None:
    fast, slow = 10.0, 2.0
    bandwidth = {pair: (slow if 2 in pair else fast) for pair in itertools.combinations(range(4), 2)}
    assert suspects(bandwidth) == [2]
    (finding,) = fabric_findings(bandwidth, {2: "gpu-c"})
    assert finding.node == 2 and "node 2 (gpu-c)" in finding.message and "0-2 2 GB/s" in finding.message
    assert suspects({(0, 1): 0.1}) == []  # one pair cannot say which end is slow
    assert suspects({p: fast for p in bandwidth}) == []

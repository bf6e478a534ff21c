"""Fingerprints compared across ranks: the outlier named with its node, host and ranks; per-rank keys ignored."""

from __future__ import annotations

from ds_doctor.checks.consistency import compare, where
from ds_doctor.reports.model import Severity


def prints(nodes: int = 2, per_node: int = 2, **overrides: dict[int, dict[str, str]]) -> list[dict[str, str]]:
    out = []
    for rank in range(nodes * per_node):
        node = rank // per_node
        fp = {
            "rank": str(rank),
            "node": str(node),
            "host": f"host-{node}",
            "env:LOCAL_RANK": str(rank % per_node),
            "python": "3.11.7",
            "package:torch": "2.13.0",
            "env:NCCL_DEBUG": "WARN",
            "shm_bytes": "68719476736",
        }
        fp.update(overrides.get("by_rank", {}).get(rank, {}))
        out.append(fp)
    return out


def test_the_same_everywhere_says_nothing_and_per_rank_keys_are_not_compared() -> None:
    assert compare(prints()) == []


def test_a_variable_set_on_one_node_names_that_node() -> None:
    odd = prints(by_rank={2: {"env:NCCL_IB_DISABLE": "1"}, 3: {"env:NCCL_IB_DISABLE": "1"}})
    (finding,) = compare(odd)
    assert finding.severity == Severity.WARNING and finding.invariant == "consistency"
    assert finding.message == (
        "env:NCCL_IB_DISABLE differs across the ranks: '1' on node 1 (host-1, ranks 2-3) "
        "(the other 2 rank(s) have '<unset>')"
    )


def test_on_a_tie_node_0_holds_the_majority_whatever_global_ranks_the_rendezvous_gave() -> None:
    odd = prints()
    for rank, fp in enumerate(odd):  # the rendezvous put node 1 on global ranks 0-1 this time
        fp["node"], fp["host"] = ("1", "host-1") if rank < 2 else ("0", "host-0")
        if rank < 2:
            fp["env:NCCL_IB_DISABLE"] = "1"
    (finding,) = compare(odd)
    assert "'1' on node 1 (host-1, ranks 0-1)" in finding.message and "have '<unset>'" in finding.message


def test_a_version_that_differs_is_an_error_with_the_majority() -> None:
    odd = prints(nodes=3, by_rank={4: {"package:torch": "2.12.0"}, 5: {"package:torch": "2.12.0"}})
    (finding,) = compare(odd)
    assert finding.severity == Severity.ERROR and finding.expected == "package:torch = '2.13.0' on every rank"
    assert (
        "'2.12.0' on node 2 (host-2, ranks 4-5)" in finding.message
        and "the other 4 rank(s)" in finding.message
    )


def test_rank_spans() -> None:
    fps = prints(nodes=1, per_node=6)
    assert where(fps, [0, 1, 2, 5]) == "node 0 (host-0, ranks 0-2,5)"

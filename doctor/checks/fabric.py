"""Node isolation for the fabric, as gcm's pairwise NCCL check does: pairs of nodes measured one pair at a
time (disjoint pairs in parallel, in rounds), and a node whose every pair falls below a fraction of the median
pair is named as the suspect. One slow pair alone names nobody: it takes the other pairs of both nodes to say
which end is slow.

Rounds: every pair of N nodes takes N - 1 rounds for even N and N for odd N (the circle method, each node in
at most one pair per round). Above `ALL_PAIRS_UP_TO` nodes only a ring of pairs (i, i+1) is measured: N pairs
in 2 rounds (3 for odd N), each node in two pairs, enough to isolate a node whose both pairs are slow."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from ds_doctor.reports.model import Finding, Severity

ALL_PAIRS_UP_TO = 8
DEFAULT_FRACTION = 0.5


def rounds(nodes: int) -> list[list[tuple[int, int]]]:
    """The pairs to measure, grouped into rounds of disjoint pairs."""
    if nodes < 2:
        return []
    if nodes > ALL_PAIRS_UP_TO:
        return _pack([_ordered(i, (i + 1) % nodes) for i in range(nodes)])
    bye = -1  # an odd count: each round one node sits out (pairs with the bye)
    players = list(range(nodes)) + ([bye] if nodes % 2 else [])
    out = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(players[i], players[-1 - i]) for i in range(half)]
        out.append([_ordered(a, b) for a, b in pairs if bye not in (a, b)])
        players = [players[0], players[-1], *players[1:-1]]
    return out


def _ordered(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a <= b else (b, a)


def _pack(pairs: Sequence[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Greedy rounds of disjoint pairs."""
    out: list[list[tuple[int, int]]] = []
    for pair in pairs:
        for round_ in out:
            if not {n for p in round_ for n in p} & set(pair):
                round_.append(pair)
                break
        else:
            out.append([pair])
    return out


def suspects(bandwidth: dict[tuple[int, int], float], fraction: float = DEFAULT_FRACTION) -> list[int]:
    """Nodes every one of whose pairs is below `fraction` x the median pair."""
    if len(bandwidth) < 2:
        return []
    floor = fraction * statistics.median(bandwidth.values())
    nodes = sorted({n for pair in bandwidth for n in pair})
    return [n for n in nodes if all(value < floor for pair, value in bandwidth.items() if n in pair)]


def fabric_findings(
    bandwidth: dict[tuple[int, int], float], hosts: dict[int, str], fraction: float = DEFAULT_FRACTION
) -> list[Finding]:
    median = statistics.median(bandwidth.values()) if bandwidth else 0.0
    findings = []
    for node in suspects(bandwidth, fraction):
        pairs = ", ".join(
            f"{a}-{b} {value:.3g} GB/s" for (a, b), value in sorted(bandwidth.items()) if node in (a, b)
        )
        findings.append(
            Finding(
                "fabric_suspect",
                Severity.ERROR,
                f"node {node} ({hosts.get(node, '?')}): every pair with it is below {fraction:g} x the "
                f"median pair ({median:.3g} GB/s): {pairs}",
                stage="pairs",
                expected=f"every pair at least {fraction:g} x the median",
                remedy="check that node's NICs and cables (ibstat, ethtool, NCCL_DEBUG=INFO), and drain "
                "it if the next run says the same",
                node=node,
            )
        )
    return findings

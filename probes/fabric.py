"""fabric: node isolation across the nodes of a multi-node run. The first rank of each node pairs with the first
rank of every other node (a ring of pairs on large clusters; ds_doctor.checks.fabric.rounds), one round of
disjoint pairs at a time: an all_reduce checked element for element, then timed, as gcm's pairwise NCCL check
does. Each pair's bus bandwidth is reported; a wrong element names the pair, and a node whose every pair falls
below a fraction of the median pair (`ds-doctor run --suspect-below`, default 0.5; the ranks read it from
the run options' suspect_below) is named as the suspect."""

from __future__ import annotations

import socket
import statistics
from typing import Any

from ds_doctor.plugins import Finding, ProbeContext, ProbeSpec, Severity, Variant
from ds_doctor.plugins.checks import collectives, fabric_findings, rounds
from ds_doctor.plugins.requirements import TORCH
from ds_doctor.probes.shared.common import time_collective

SPEC = ProbeSpec(
    name="fabric",
    scenario="smoke",
    description="pairs of nodes: an all_reduce checked and timed one pair at a time; a node whose every pair is slow",
    world_sizes=(),
    requires=(TORCH,),
    timeout_s=600.0,
    across_nodes=("*",),
    alone=True,  # timed: never beside another launch's work
)

SIZE = {"cpu": 1 << 22, "cuda": 1 << 28}  # bytes per pair measurement
ITERS = {"cpu": (2, 5), "cuda": (5, 20)}  # (warm-up, timed)


def variants() -> list[Variant]:
    return [Variant("pairs", None, level=2)]


def run(ctx: ProbeContext) -> None:
    import torch.distributed as dist

    me = {"node": ctx.options.node_rank or 0, "local": ctx.local_rank, "host": socket.gethostname()}
    everyone = ctx.all_gather_json(me)
    leaders = {w["node"]: rank for rank, w in enumerate(everyone) if w["local"] == 0}
    hosts = {w["node"]: w["host"] for w in everyone}
    schedule = rounds(len(leaders))
    nodes = sorted(leaders)
    # every rank creates every pair's group, in the same order (new_group is collective)
    groups = {(a, b): dist.new_group([leaders[nodes[a]], leaders[nodes[b]]]) for r in schedule for a, b in r}
    rows = []
    for number, pairs in enumerate(schedule):
        ctx.enter(f"round {number + 1} of {len(schedule)}")
        for a, b in pairs:
            ends = (leaders[nodes[a]], leaders[nodes[b]])
            if ctx.rank in ends:
                rows.append(_pair(ctx, groups[(a, b)], ends.index(ctx.rank), nodes[a], nodes[b]))
        dist.barrier()
    _report(ctx, [row for rank_rows in ctx.all_gather_json(rows) for row in rank_rows if row["first"]], hosts)


def _pair(ctx: ProbeContext, group: Any, pair_rank: int, node_a: int, node_b: int) -> dict[str, Any]:
    """One pair's checked and timed all_reduce, on this end of it."""
    import torch

    device = torch.device(ctx.device)
    numel = SIZE[ctx.device_kind] // 4
    tensors = collectives.inputs("all_reduce", numel, pair_rank, 2, device=device)
    check = collectives.compare(
        collectives.run_once("all_reduce", tensors, group),
        collectives.expected("all_reduce", numel, pair_rank, 2, device=device),
    )
    seconds = time_collective("all_reduce", numel, pair_rank, 2, device, ITERS[ctx.device_kind], group)
    _, busbw = collectives.bandwidths("all_reduce", numel * 4, seconds, 2)
    return {
        "first": pair_rank == 0,
        "node_a": node_a,
        "node_b": node_b,
        "bytes": numel * 4,
        "time_us": round(seconds * 1e6, 2),
        "busbw_gbps": round(busbw, 4),
        "check": check.describe(),
        "ok": check.ok,
    }


def _report(ctx: ProbeContext, rows: list[dict[str, Any]], hosts: dict[int, str]) -> None:
    for row in rows:
        ctx.measure_row(**{k: row[k] for k in ("node_a", "node_b", "bytes", "time_us", "busbw_gbps")})
    bandwidth = {(row["node_a"], row["node_b"]): row["busbw_gbps"] for row in rows}
    if bandwidth:
        ctx.measure("busbw_gbps", round(statistics.median(bandwidth.values()), 4))
    ctx.note("rounds", len(rounds(len(hosts))))
    if ctx.rank != 0:
        return
    ctx.add_findings(fabric_findings(bandwidth, hosts, ctx.options.suspect_below))
    ctx.add_findings(
        Finding(
            "fabric_result",
            Severity.ERROR,
            f"all_reduce between node {row['node_a']} and node "
            f"{row['node_b']} ({hosts.get(row['node_a'])} - {hosts.get(row['node_b'])}): {row['check']}",
            stage="pairs",
            expected="every element exact",
        )
        for row in rows
        if not row["ok"]
    )

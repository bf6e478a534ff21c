"""A probe that runs only across the nodes of a multi-node run, registered by the tests only
(DS_DOCTOR_EXTRA_PROBES): every rank waits in a named stage, long enough for a test to kill a node, then
joins an all_reduce that a dead node never answers."""

from __future__ import annotations

import time

from ds_doctor.plugins import ProbeContext, ProbeSpec, Variant

SPEC = ProbeSpec(
    name="node_faults",
    scenario="smoke",
    description="a case across the nodes that waits to be killed",
    world_sizes=(),
    timeout_s=60.0,
    across_nodes=("*",),
)
WAIT_S = 6.0  # time enough for a test that polls the heartbeat every 0.2 s to kill a node


def variants() -> list[Variant]:
    return [Variant("wait-then-reduce", None), Variant("after", None)]


def run(ctx: ProbeContext) -> None:
    import torch
    import torch.distributed as dist

    if ctx.case_id.startswith("node_faults[wait"):
        ctx.enter("waiting for a kill")
        time.sleep(WAIT_S)
    ctx.enter("all_reduce")
    value = torch.ones(1)
    dist.all_reduce(value)

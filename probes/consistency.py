"""consistency: every rank of a launch publishes its fingerprint (versions, builds, driver, GPU, /dev/shm, the
allowlisted environment) and rank 0 compares them key by key (`ds_doctor.checks.consistency`). It is the first
case of every launch with more than one rank, and on a multi-node run it runs across the nodes at level 1
too: on a cluster it is the cheapest and most telling check (a version, build or NCCL setting that differs
on one node)."""

from __future__ import annotations

from ds_doctor.plugins import ProbeContext, ProbeSpec, Variant
from ds_doctor.plugins.checks import compare
from ds_doctor.plugins.collect import fingerprint

SPEC = ProbeSpec(
    name="consistency",
    scenario="smoke",
    description="every rank's versions, builds, driver, GPU and environment variables compared across the ranks",
    world_sizes=(2,),
    timeout_s=120.0,
    scale_to_node=True,
    across_nodes=("*",),
)


def variants() -> list[Variant]:
    return [Variant("fingerprint", None, level=1)]


def run(ctx: ProbeContext) -> None:
    ctx.enter("fingerprint")
    prints = ctx.all_gather_json(fingerprint(ctx.rank, ctx.options.node_rank, ctx.device))
    ctx.note("keys_compared", len({key for fp in prints for key in fp}))
    if ctx.rank == 0:
        ctx.enter("compare")
        ctx.add_findings(compare(prints))

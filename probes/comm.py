"""Hardware smoke, collectives: all_reduce, all_gather, reduce_scatter, broadcast and alltoall over a range of
sizes, each result checked on every rank against the exact expected values, with algorithm and
bus bandwidth as nccl-tests defines them (doctor/checks/collectives.py). nccl on GPUs, gloo on CPU.

Per size: one checked run on fresh data, a few warm-up runs, then timed runs whose mean time is
averaged over the ranks (as nccl-tests does), then a second checked run on fresh data. A wrong
element on any rank is an error finding: the case fails with the size, rank and first bad index.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ds_doctor.plugins import Finding, ProbeContext, ProbeSpec, Requirement, Severity, Variant
from ds_doctor.plugins.checks import collectives
from ds_doctor.probes.shared.common import time_collective

SPEC = ProbeSpec(
    name="comm",
    scenario="smoke",
    description="collectives checked element for element on every rank; algbw/busbw as nccl-tests defines them",
    world_sizes=(1, 2),
    requires=(Requirement("torch", "torch"),),
    timeout_s=300.0,
    scale_to_node=True,
    across_nodes=("*",),  # also across every node of a multi-node run
)

#: Sizes of the largest buffer in bytes: small on CPU (gloo over loopback), up to 1 GiB on GPUs.
SIZES = {"cpu": (1 << 12, 1 << 16, 1 << 20, 1 << 22), "cuda": (1 << 20, 1 << 24, 1 << 27, 1 << 30)}
ITERS = {"cpu": (2, 5), "cuda": (5, 20)}  # (warm-up, timed) runs per size

#: A test hook: called with (collective, rank, result) after each checked run. The tests' faulty
#: probe uses it to plant a wrong element, as a bad link would; None in real runs.
AfterRun = Callable[[str, int, Any], None]


@dataclasses.dataclass(frozen=True)
class CommCase:
    collective: str  # one of collectives.COLLECTIVES


def variants() -> list[Variant]:
    return [Variant(name=name, params=CommCase(name), level=2) for name in collectives.COLLECTIVES]


def run(ctx: ProbeContext, after_run: AfterRun | None = None) -> None:
    import torch

    collective = ctx.params.collective
    device = torch.device(ctx.device)
    warmup, iters = ITERS[ctx.device_kind]
    algbw = busbw = 0.0
    for size in SIZES[ctx.device_kind]:
        numel = max(ctx.world_size, size // 4 // ctx.world_size * ctx.world_size)
        ctx.enter(f"{collective} {numel * 4} B: check")
        _check(ctx, collective, numel, device, after_run, when="before timing")
        ctx.enter(f"{collective} {numel * 4} B: timing")
        seconds = time_collective(collective, numel, ctx.rank, ctx.world_size, device, (warmup, iters))
        ctx.enter(f"{collective} {numel * 4} B: check again")
        _check(ctx, collective, numel, device, after_run, when="after timing")
        algbw, busbw = collectives.bandwidths(collective, numel * 4, seconds, ctx.world_size)
        ctx.measure_row(
            bytes=numel * 4,
            time_us=round(seconds * 1e6, 2),
            algbw_gbps=round(algbw, 4),
            busbw_gbps=round(busbw, 4),
        )
    ctx.note("backend", ctx.backend)
    ctx.note("dtype", "float32")
    ctx.note("bus_factor", collectives.bus_factor(collective, ctx.world_size))
    # The headline numbers are the largest size's, where the link, not the latency, sets the time.
    ctx.measure("algbw_gbps", round(algbw, 4))
    ctx.measure("busbw_gbps", round(busbw, 4))


def _check(
    ctx: ProbeContext, collective: str, numel: int, device: Any, after_run: AfterRun | None, *, when: str
) -> None:
    tensors = collectives.inputs(collective, numel, ctx.rank, ctx.world_size, device=device)
    result = collectives.run_once(collective, tensors)
    if after_run is not None:
        after_run(collective, ctx.rank, result)
    check = collectives.compare(
        result, collectives.expected(collective, numel, ctx.rank, ctx.world_size, device=device)
    )
    if not check.ok:
        ctx.check(
            [
                Finding(
                    invariant="collective_result",
                    severity=Severity.ERROR,
                    message=f"{collective} of {numel * 4} B over {ctx.world_size} rank(s), {when}: {check.describe()}",
                    stage=ctx.stage,
                    expected="every element equal to the exact reduction of the ranks' inputs",
                    remedy="a wrong collective result is a hardware or transport fault: rerun with NCCL_DEBUG=INFO, "
                    "check the GPUs' health section and the links (nvidia-smi topo -m, nvidia-smi nvlink -s), "
                    "and drain the node if it repeats",
                )
            ]
        )

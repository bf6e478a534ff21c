"""Hardware smoke, collectives: all_reduce, all_gather, reduce_scatter, broadcast and alltoall over a range of
sizes, each result checked on every rank against the exact expected values: in fp32 with algorithm and bus
bandwidth as nccl-tests defines them (doctor/checks/collectives.py), and in bf16 (what mixed-precision jobs reduce:
NCCL's bf16 reduction kernels) checked twice per size, untimed (the link's bandwidth is the fp32 cases'). nccl on
GPUs, gloo on CPU.

Per size: one checked run on fresh data, a few warm-up runs, then timed runs whose mean time is
averaged over the ranks (as nccl-tests does), then a second checked run on fresh data. A wrong
element on any rank is an error finding: the case fails with the size, rank and first bad index.
At one rank nothing moves between ranks: each size is checked twice, untimed, and the case shows no bandwidth.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ds_doctor.plugins import Finding, ProbeContext, ProbeSpec, Severity, Variant
from ds_doctor.plugins.checks import collectives
from ds_doctor.plugins.requirements import TORCH
from ds_doctor.probes.shared.common import time_collective

SPEC = ProbeSpec(
    name="comm",
    scenario="smoke",
    description="collectives checked element for element on every rank; algbw/busbw as nccl-tests defines them",
    world_sizes=(1, 2),
    requires=(TORCH,),
    timeout_s=300.0,
    scale_to_node=True,
    across_nodes=("*",),  # also across every node of a multi-node run
    alone=True,  # timed: never beside another launch's work
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
    dtype: str = "float32"  # one of collectives.DTYPES


def variants() -> list[Variant]:
    return [Variant(name=name, params=CommCase(name), level=2) for name in collectives.COLLECTIVES] + [
        # untimed (exact bits only), so they need not run alone
        Variant(name=f"{name}-bf16", params=CommCase(name, "bfloat16"), level=2, alone=False)
        for name in collectives.COLLECTIVES
    ]


def run(ctx: ProbeContext, after_run: AfterRun | None = None) -> None:
    import torch

    case: CommCase = ctx.params
    collective, dtype, width = case.collective, case.dtype, collectives.element_size(case.dtype)
    device = torch.device(ctx.device)
    # the bandwidth is the link's, measured in fp32 (bf16 is the reduction kernels'); one rank has no link
    timed = dtype == "float32" and ctx.world_size > 1
    algbw = busbw = 0.0
    for size in SIZES[ctx.device_kind]:
        numel = max(ctx.world_size, size // width // ctx.world_size * ctx.world_size)
        nbytes = numel * width
        ctx.enter(f"{collective} {nbytes} B: check")
        _check(ctx, case, numel, device, after_run, when="before timing" if timed else "first")
        if not timed:
            ctx.enter(f"{collective} {nbytes} B: check again")
            _check(ctx, case, numel, device, after_run, when="again")
            continue
        algbw, busbw = _timed(ctx, case, numel, device, after_run)
    ctx.note("backend", ctx.backend)
    ctx.note("dtype", dtype)
    if dtype != "float32":
        return
    if not timed:  # shown as a dash with the reason (`MEASURES`), never as 0 or a copy within one process
        ctx.measure("algbw_gbps", None)
        ctx.measure("busbw_gbps", None)
        return
    ctx.note("bus_factor", collectives.bus_factor(collective, ctx.world_size))
    # The headline numbers are the largest size's, where the link, not the latency, sets the time.
    ctx.measure("algbw_gbps", round(algbw, 4))
    ctx.measure("busbw_gbps", round(busbw, 4))


def _timed(
    ctx: ProbeContext, case: CommCase, numel: int, device: Any, after_run: AfterRun | None
) -> tuple[float, float]:
    """Timed runs of one size between two checks (a fault the load brings out shows in the second); its row."""
    collective, nbytes = case.collective, numel * 4
    ctx.enter(f"{collective} {nbytes} B: timing")
    seconds = time_collective(collective, numel, ctx.rank, ctx.world_size, device, ITERS[ctx.device_kind])
    ctx.enter(f"{collective} {nbytes} B: check again")
    _check(ctx, case, numel, device, after_run, when="after timing")
    algbw, busbw = collectives.bandwidths(collective, nbytes, seconds, ctx.world_size)
    ctx.measure_row(
        bytes=nbytes, time_us=round(seconds * 1e6, 2), algbw_gbps=round(algbw, 4), busbw_gbps=round(busbw, 4)
    )
    return algbw, busbw


def _check(
    ctx: ProbeContext, case: CommCase, numel: int, device: Any, after_run: AfterRun | None, *, when: str
) -> None:
    collective, dtype = case.collective, case.dtype
    tensors = collectives.inputs(collective, numel, ctx.rank, ctx.world_size, device=device, dtype=dtype)
    result = collectives.run_once(collective, tensors)
    if after_run is not None:
        after_run(collective, ctx.rank, result)
    check = collectives.compare(
        result, collectives.expected(collective, numel, ctx.rank, ctx.world_size, device=device, dtype=dtype)
    )
    if not check.ok:
        ctx.add_findings(
            [
                Finding(
                    invariant="collective_result",
                    severity=Severity.ERROR,
                    message=f"{collective} of {numel * collectives.element_size(dtype)} B ({dtype}) over "
                    f"{ctx.world_size} rank(s), {when}: {check.describe()}",
                    stage=ctx.stage,
                    expected="every element equal to the exact reduction of the ranks' inputs",
                    remedy="a wrong collective result is a hardware or transport fault: rerun with NCCL_DEBUG=INFO, "
                    "check the GPUs' health section and the links (nvidia-smi topo -m, nvidia-smi nvlink -s), "
                    "and drain the node if it repeats",
                )
            ]
        )

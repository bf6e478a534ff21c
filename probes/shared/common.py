"""Helpers several probe families share."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from ds_doctor.plugins import ProbeContext


@contextlib.contextmanager
def accelerate_session() -> Iterator[None]:
    """One case's use of Accelerate: its process-wide singletons and the ACCELERATE_* variables its
    plugins export are reset afterwards, so the next case in the launch starts clean."""
    saved_env = dict(os.environ)
    try:
        yield
    finally:
        reset_accelerate()
        os.environ.clear()
        os.environ.update(saved_env)


def reset_accelerate() -> None:
    """Accelerate's singletons reset, where this process imported Accelerate (a route that never used it, on a
    node with none, resets none), as each release allows (`reset_partial_state`, `GradientState._reset_state`
    came after 0.17); where a release has no reset, its shared state dicts emptied (the corpus runs 0.15 and 0.17)."""
    import inspect

    if "accelerate.state" not in sys.modules:
        return

    from accelerate.state import AcceleratorState, GradientState

    if "reset_partial_state" in inspect.signature(AcceleratorState._reset_state).parameters:
        AcceleratorState._reset_state(reset_partial_state=True)
    else:
        AcceleratorState._reset_state()
        partial = getattr(
            sys.modules["accelerate.state"], "PartialState", None
        )  # 0.17-0.19: no reset of its own
        if partial is not None:
            partial._shared_state = {}
    if hasattr(GradientState, "_reset_state"):
        GradientState._reset_state()
    else:
        GradientState._shared_state = {}


def dist_world_size() -> int | None:
    """The torch.distributed world size, None outside a process group."""
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_initialized() else None


def full_values(module: Any) -> dict[str, Any]:
    """Each parameter's full value as a detached CPU copy (ZeRO-3 partitions gathered on every rank);
    a parameter on meta stays on meta: it has no value."""

    params = dict(module.named_parameters())
    partitioned = [p for p in params.values() if hasattr(p, "ds_id")]
    if partitioned:
        import deepspeed

        with deepspeed.zero.GatheredParameters(partitioned):
            return {
                name: p.detach().to("cpu" if p.device.type != "meta" else "meta", copy=True)
                for name, p in params.items()
            }
    return {
        name: p.detach().to("cpu" if p.device.type != "meta" else "meta", copy=True)
        for name, p in params.items()
    }


def require_deepspeed_ops(ctx: ProbeContext) -> None:
    """Fail at once where the run's build phase could not build DeepSpeed's ops: a case must not build them again
    under its own clock (a first run on a loaded node timed out every DeepSpeed case so)."""
    if ctx.options.ops_failed:
        raise RuntimeError(ctx.options.ops_failed)


def build_deepspeed_ops(ctx: ProbeContext) -> None:
    """Load DeepSpeed's ops once per launch, as a probe's `setup` (built before the launch by the run's phase)."""
    from ds_doctor.plugins.process import load_deepspeed_ops

    require_deepspeed_ops(ctx)
    load_deepspeed_ops(ctx.enter)


def synchronize(device: Any) -> None:
    """Wait for the device's queued work (CUDA); a CPU device has none. For timing."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_collective(
    collective: str,
    numel: int,
    rank: int,
    world_size: int,
    device: Any,
    iters: tuple[int, int],
    group: Any = None,
) -> float:
    """Mean seconds of one `collective` on `numel` elements over `group` (default: every rank), averaged over its
    ranks (nccl-tests' `Allreduce(..., average)`); `iters` is (warm-up, timed)."""
    import time

    import torch
    import torch.distributed as dist

    from ds_doctor.plugins.checks import collectives

    warmup, timed = iters
    tensors = collectives.inputs(collective, numel, rank, world_size, device=device)
    if collective == "all_reduce":
        tensors[0].zero_()  # summed in place over and over: zeros stay finite
    for _ in range(warmup):
        collectives.run_once(collective, tensors, group)
    synchronize(device)
    dist.barrier(group=group)
    started = time.perf_counter()
    for _ in range(timed):
        collectives.run_once(collective, tensors, group)
    synchronize(device)
    elapsed = torch.tensor([(time.perf_counter() - started) / timed], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, group=group)
    return float(elapsed) / world_size


def refuse_fsdp2_over_gloo_on_gpu(ctx: ProbeContext) -> None:
    """Skip where FSDP2 would run gloo collectives on CUDA tensors: torch segfaults there (a rank killed by SIGSEGV in
    the first backward, seen on the H200 in the shared-GPU mode `gloo`; pytorch/pytorch#132471)."""
    if ctx.backend == "gloo" and ctx.device_kind == "cuda":
        ctx.skip(
            "FSDP2 over gloo with CUDA tensors segfaults in torch (pytorch/pytorch#132471): with ranks sharing a "
            "GPU it runs in the default mode (DS_DOCTOR_SHARED_GPU=nccl-hostid)"
        )

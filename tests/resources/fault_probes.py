"""A probe family registered by the tests only (DS_DOCTOR_EXTRA_PROBES): it plants real faults."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

from ds_doctor.plugins import ProbeContext, ProbeSpec, Variant

SPEC = ProbeSpec(
    name="faults",
    scenario="smoke",
    description="planted faults for the runner's tests",
    world_sizes=(2,),
    timeout_s=6.0,
)


def variants() -> list[Variant]:
    return [Variant(name, name) for name in FAULTS]  # the fault's name is all a case needs


FAULTS = ("ok", "hang", "sigkill", "raise", "segfault", "abort", "exit3", "oom", "ok-after")


def run(ctx: ProbeContext) -> None:
    import torch
    import torch.distributed as dist

    fault: str = ctx.params
    ctx.enter("all_reduce")
    value = torch.ones(1)
    dist.all_reduce(value)
    assert value.item() == ctx.world_size
    if ctx.rank != 1:
        return
    if fault == "hang":
        ctx.enter("stuck on purpose")
        time.sleep(3600)
    elif fault == "sigkill":
        ctx.enter("about to be killed")
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "raise":
        ctx.enter("raising")
        raise ValueError("planted failure on rank 1")
    elif fault == "segfault":
        ctx.enter("dereferencing NULL")
        print("rank 1 about to segfault", file=sys.stderr, flush=True)
        ctypes.string_at(0)
    elif fault == "abort":
        ctx.enter("aborting")
        print("rank 1 about to abort", file=sys.stderr, flush=True)
        os.abort()
    elif fault == "exit3":
        ctx.enter("exiting")
        print("rank 1 calls sys.exit(3)", file=sys.stderr, flush=True)
        sys.exit(3)
    elif fault == "oom":
        ctx.enter("allocating")
        print("rank 1 asks for 4 EiB", file=sys.stderr, flush=True)
        torch.empty(2**62, dtype=torch.uint8)  # the allocator refuses: a real out-of-memory error

"""Planted hangs and a straggler, registered by the tests only (DS_DOCTOR_EXTRA_PROBES): real collectives (gloo on
CPU, NCCL on a GPU) under real torchrun, each rank doing something different on purpose."""

from __future__ import annotations

import threading
import time

from ds_doctor.plugins import ProbeContext, ProbeSpec, Variant

SPEC = ProbeSpec(
    name="hangs",
    scenario="smoke",
    description="planted hangs for the forensics tests",
    world_sizes=(2,),
    # each rank's clock starts at its own start of the case: on a box loaded as `make test` loads it, a rank may
    # start its case seconds after the other, and a planted hang must be met at the planted stage, not in warm-up
    timeout_s=8.0,
)
FAULTS = ("missing", "mismatch", "deadlock", "straggler")


def variants() -> list[Variant]:
    return [Variant(name, name) for name in FAULTS]


def wait_for_me() -> None:
    """Rank 1 sits here while rank 0 waits for it in all_reduce."""
    time.sleep(3600)


def hold_then_block(lock: threading.Lock, held: threading.Event) -> None:
    with lock:
        held.set()
        time.sleep(3600)


def deadlock() -> None:
    lock, held = threading.Lock(), threading.Event()
    threading.Thread(target=hold_then_block, args=(lock, held), name="lock-holder", daemon=True).start()
    held.wait()
    with lock:  # never: the holder keeps it
        pass


def run(ctx: ProbeContext) -> None:
    import torch
    import torch.distributed as dist

    fault: str = ctx.params
    on = {"device": ctx.device}
    ctx.enter("warm-up")
    dist.all_reduce(torch.ones(4, **on))
    if fault == "straggler":
        ctx.enter("compute")
        if ctx.rank == 1:
            time.sleep(2.0)
        ctx.enter("sync")
        dist.all_reduce(torch.ones(4, **on))
        return
    ctx.enter("planted")
    if ctx.rank == 0:
        dist.all_reduce(torch.ones(1024, **on))
    elif fault == "missing":
        wait_for_me()
    elif fault == "mismatch":
        dist.all_gather([torch.zeros(8, **on), torch.zeros(8, **on)], torch.ones(8, **on))
    elif fault == "deadlock":
        deadlock()

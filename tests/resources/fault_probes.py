"""A probe family registered by the tests only (DS_DOCTOR_EXTRA_PROBES): it plants real faults."""

from __future__ import annotations

import os
import signal
import time

from doctor.context import ProbeContext
from probes.base import ProbeSpec, Variant

SPEC = ProbeSpec(name="faults", scenario="smoke", description="planted faults for the runner's tests",
                 world_sizes=(2,), timeout_s=6.0)


def variants() -> list[Variant]:
    return [Variant(name, {"fault": name}) for name in ("ok", "hang", "sigkill", "raise", "ok-after")]


def run(ctx: ProbeContext) -> None:
    import torch
    import torch.distributed as dist

    fault = ctx.params["fault"]
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

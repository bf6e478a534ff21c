"""ddp_sync: after one DistributedDataParallel step on different data per rank, every rank holds the same
parameters (DDP averaged the gradients). A rank whose parameters differ from rank 0's is an error finding
with that parameter's device-map record as evidence."""

from __future__ import annotations

import dataclasses

from ds_doctor.plugins import Finding, ProbeContext, ProbeSpec, Severity, Variant
from ds_doctor.plugins.requirements import TORCH

SPEC = ProbeSpec(
    name="ddp_sync",
    scenario="smoke",
    description="DDP: after one step on different data per rank, every rank holds rank 0's parameters",
    world_sizes=(1, 2),
    requires=(TORCH,),
    timeout_s=60.0,
)


@dataclasses.dataclass(frozen=True)
class Params:
    width: int  # the Linear layer's input features


def variants() -> list[Variant]:
    return [Variant("linear", Params(width=16), level=2), Variant("wide", Params(width=1024))]


def run(ctx: ProbeContext) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    params: Params = ctx.params
    ctx.enter("build")
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Linear(params.width, 1).to(ctx.device)
    ddp = DistributedDataParallel(model, device_ids=[ctx.local_rank] if ctx.device_kind == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ctx.enter("step")
    x = torch.randn(4, params.width, generator=torch.Generator().manual_seed(ctx.rank)).to(ctx.device)
    ddp(x).sum().backward()
    optimizer.step()
    records = ctx.snapshot("after_step", module=model, optimizer=optimizer)
    ctx.enter("compare with rank 0")
    for name, param in model.named_parameters():
        reference = param.detach().clone()
        dist.broadcast(reference, src=0)
        if not torch.equal(reference, param.detach()):
            ctx.add_findings(
                [
                    Finding(
                        "ddp_params_in_sync",
                        Severity.ERROR,
                        f"{name} differs from rank 0's after one step",
                        stage="after_step",
                        expected="the same parameters on every rank",
                        evidence=tuple(r for r in records if r.path == name),
                    )
                ]
            )

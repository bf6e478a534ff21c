"""ZeRO-3's module hooks on a wrapper that delegates attribute lookups to a child, as PEFT's `modules_to_save`
wrapper does (the original layer frozen inside, a trained copy beside it, unknown attributes read from the
original). Each module ZeRO-3 hooks must hold its own backward-hook state; before DeepSpeed 0.19.3 the wrapper
found the child's through the delegation, and its first forward fails with `'Linear' object has no attribute
'ds_grads_remaining'` (DeepSpeed #7203). The healthy case wraps without delegating."""

from __future__ import annotations

import dataclasses
from typing import Any

from ds_doctor.plugins import ProbeContext, ProbeSpec, Variant
from ds_doctor.plugins.checks import zero3_hooks_own_state
from ds_doctor.plugins.requirements import DEEPSPEED, TORCH

SPEC = ProbeSpec(
    name="zero3_hooks",
    scenario="S1",
    description="ZeRO-3 hooks on attribute-delegating wrappers (PEFT modules_to_save): each module's own hook state",
    world_sizes=(2,),
    requires=(TORCH, DEEPSPEED),
    timeout_s=180.0,
    known_issues=("ds_z3_ds_grads_remaining_attr_missing",),
)
HIDDEN = 16


@dataclasses.dataclass(frozen=True)
class Wrapping:
    delegates: bool  # unknown attributes read from the wrapped original, as PEFT's ModulesToSaveWrapper


def variants() -> list[Variant]:
    return [
        Variant("plain-wrapper", Wrapping(False), level=3),
        Variant("delegating-wrapper", Wrapping(True), level=3, reproduce=True),
    ]


def build_model(delegates: bool) -> Any:
    import copy

    import torch

    class ModulesToSave(torch.nn.Module):
        def __init__(self, original: torch.nn.Module) -> None:
            super().__init__()
            self.original_module = original.requires_grad_(False)
            self.trained = copy.deepcopy(original).requires_grad_(True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.trained(x)

        def __getattr__(self, name: str) -> Any:
            try:
                return super().__getattr__(name)
            except AttributeError:
                if not delegates or name == "original_module":
                    raise
                return getattr(self.original_module, name)

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(HIDDEN, HIDDEN),
        torch.nn.ReLU(),
        ModulesToSave(torch.nn.Linear(HIDDEN, HIDDEN)),
        torch.nn.Linear(HIDDEN, 1),
    )


def run(ctx: ProbeContext) -> None:
    import deepspeed
    import torch

    wrapping: Wrapping = ctx.params
    reproduce = wrapping.delegates
    model = build_model(wrapping.delegates)
    ctx.enter("initialize")
    trainable = [p for p in model.parameters() if p.requires_grad]
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "zero_optimization": {"stage": 3},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=torch.optim.AdamW(trainable, lr=1e-3), config=config
    )
    try:
        ctx.note("deepspeed_version", deepspeed.__version__)
        ctx.add_findings(zero3_hooks_own_state(engine.module, ctx.rank))
        ctx.enter("train step")
        torch.manual_seed(1 + ctx.rank)
        batch = torch.randn(2, HIDDEN, device=engine.device)
        showed: list[str] = []
        try:
            loss = engine(batch).pow(2).mean()
            engine.backward(loss)
            engine.step()
        except AttributeError as exc:
            if not (reproduce and "ds_grads_remaining" in str(exc)):
                raise
            showed.append(f"the first forward through the wrapper failed: {exc}")
        if reproduce:
            ctx.reproduce(SPEC.known_issues[0], showed=showed, caught=ctx.has_error_findings)
    finally:
        engine.destroy()

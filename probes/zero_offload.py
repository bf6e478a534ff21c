"""S2: DeepSpeed ZeRO 1/2/3 with and without CPU offload: where every fp32 partition, its gradient
and its optimizer state live, and what `unscale_and_clip_grads` multiplies together.

Every case trains a tiny MLP through `deepspeed.initialize` with an AdamW defined in the config,
gradient accumulation over 4 micro steps and a clipping threshold so small that clipping always
fires (the S2 crash sits on the clipping line). Device maps are taken after init, after the
first micro step's backward, inside each `unscale_and_clip_grads` call, and after the step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ds_doctor.plugins import DeepSpeedConfigNote, ModelNote, ProbeContext, ProbeSpec, RankOptions, Variant
from ds_doctor.plugins.checks import (
    ZeroPromise,
    buffer_placement,
    grad_accum_dtype,
    ties_kept,
    zero_invariants,
)
from ds_doctor.plugins.collect import observe_unscale_and_clip
from ds_doctor.plugins.requirements import DEEPSPEED, TORCH
from ds_doctor.plugins.usersetup import UserConfig, change_findings, fill, route_optimizer, trainer_optimizer
from ds_doctor.probes.shared.common import build_deepspeed_ops
from ds_doctor.probes.shared.models import batch, build_mlp

SPEC = ProbeSpec(
    name="zero_offload",
    scenario="S2",
    description="ZeRO 1/2/3 x offload x dtype: fp32 partitions, gradients and optimizer state on the promised device",
    world_sizes=(1, 2),
    requires=(TORCH, DEEPSPEED),
    timeout_s=180.0,
    known_issues=("ds_z3_offload_gradnorm_device_mismatch",),
    across_nodes=("z3-opt+param-bf16",),  # also across every node of a multi-node run
)

MICRO_BATCH = 2
ACCUMULATION = 4
CLIP = 1e-4  # far below any real gradient norm here, so the clipping branch always runs
OFFLOADS = {"none": (False, False), "opt": (True, False), "opt+param": (True, True)}
REPRESENTATIVE = "z3-opt+param-bf16"


@dataclasses.dataclass(frozen=True)
class ZeroCase:
    stage: int
    offload: str  # a key of OFFLOADS
    dtype: str  # "bf16" or "fp32"

    @property
    def name(self) -> str:
        return f"z{self.stage}-{self.offload}-{self.dtype}"


def variants(options: RankOptions) -> list[Variant]:
    cases = [
        ZeroCase(stage, offload, dtype)
        for stage in (1, 2, 3)
        for offload, (_, offload_param) in OFFLOADS.items()
        if not offload_param or stage == 3  # parameter offload exists only in ZeRO-3
        for dtype in ("bf16", "fp32")
    ]
    out = [
        Variant(name=case.name, params=case, level=2 if case.name == REPRESENTATIVE else 3) for case in cases
    ]
    user = options.user_deepspeed_config()
    return [*out, Variant("user-config", user, level=2)] if user is not None else out


def build_config(params: ZeroCase) -> dict[str, Any]:
    offload_optimizer, offload_param = OFFLOADS[params.offload]
    zero: dict[str, Any] = {"stage": params.stage}
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    if offload_param:
        zero["offload_param"] = {"device": "cpu", "pin_memory": False}
    return {
        "train_micro_batch_size_per_gpu": MICRO_BATCH,
        "gradient_accumulation_steps": ACCUMULATION,
        "gradient_clipping": CLIP,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.01}},
        "zero_optimization": zero,
        "bf16": {"enabled": params.dtype == "bf16"},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


setup = build_deepspeed_ops  # DeepSpeed's optimizer ops, built or loaded once per launch


def run(ctx: ProbeContext) -> None:
    import deepspeed

    config = configure(ctx)
    user = isinstance(ctx.params, UserConfig)
    promise = ZeroPromise.from_config(config, accelerator=ctx.device)
    ctx.note("deepspeed_config", config)
    model = ctx.user_model()
    ctx.enter("initialize")
    module = model.module if model is not None else build_mlp()
    if model is not None:
        ctx.note(ModelNote.NOTE, model.describe())
    ctx.snapshot("before_init", module=module)
    optimizer = route_optimizer(config, module.parameters())  # a user config without one: the Trainer's
    engine, _, _, _ = deepspeed.initialize(
        model=module,
        model_parameters=None if optimizer else module.parameters(),
        optimizer=optimizer,
        config=config,
    )
    try:
        ctx.note("optimizer", type(engine.optimizer).__name__)
        ctx.note("inner_optimizer", type(getattr(engine.optimizer, "optimizer", None)).__name__)
        ctx.snapshot("after_init", engine=engine)
        with observe_unscale_and_clip(engine.optimizer, ctx.rank, ctx.add_records) as calls:
            train_window(
                engine,
                seed=1000 * ctx.rank,
                enter=ctx.enter,
                model=model,
                after_first_backward=lambda: ctx.snapshot("after_backward", engine=engine),
            )
        ctx.snapshot("after_step", engine=engine)
        _check_the_step_ran(
            ctx, engine, calls[0], float(config.get("gradient_clipping") or 0), require_clip=not user
        )
        ctx.add_findings(zero_invariants(ctx.records, promise))
        if user:  # advice on the user's config; the family's own leave grad_accum_dtype unset on purpose, as most do
            ctx.add_findings(grad_accum_dtype(promise))
        ctx.add_findings(buffer_placement(ctx.records, ctx.device, "after_init"))
        ctx.add_findings(ties_kept(ctx.records, "before_init", "after_step"))
    finally:
        engine.destroy()


def configure(ctx: ProbeContext) -> dict[str, Any]:
    """The config a case trains with: the family's own, or the user's made runnable here (what was filled and what
    changed is in the notes, each change also a warning finding)."""
    if not isinstance(ctx.params, UserConfig):
        return build_config(ctx.params)
    user: UserConfig = ctx.params
    filled = fill(user.config, ctx.world_size, ctx.device)
    trainer_optimizer(filled)  # an HF-Trainer-style config: the Trainer's optimizer, said
    ctx.note(
        DeepSpeedConfigNote.NOTE,
        {
            "path": user.path,
            "sha256": user.sha256,
            "config": user.config,
            "filled": filled.filled,
            "changed": filled.changed,
            "left_to_deepspeed": filled.unfilled,
        },
    )
    ctx.add_findings(change_findings(filled, ctx.rank))
    return {**filled.config, "steps_per_print": 10**9, "wall_clock_breakdown": False}


def train_window(
    engine: Any,
    *,
    seed: int,
    enter: Callable[[str], None] | None = None,
    after_first_backward: Callable[[], object] | None = None,
    model: Any = None,
) -> None:
    """One accumulation window: the engine's accumulation steps, the last of them the boundary step. `model`: the
    user's (`ctx.user_model()`), trained on its own batches; else the tiny MLP's regression."""
    import torch

    dtype = torch.bfloat16 if engine.bfloat16_enabled() else torch.float32
    micro_batch = engine.train_micro_batch_size_per_gpu()
    for micro in range(engine.gradient_accumulation_steps()):
        if enter is not None:
            enter(f"micro_step {micro}")
        if model is not None:
            loss = model.loss(engine, micro_batch, device=engine.device, dtype=dtype, seed=seed + micro)
        else:
            x, y = batch(micro_batch, dtype=dtype, device=engine.device, seed=seed + micro)
            loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        if micro == 0 and after_first_backward is not None:
            after_first_backward()
        engine.step()


def _check_the_step_ran(
    ctx: ProbeContext, engine: Any, clip_calls: int, clip: float, require_clip: bool
) -> None:
    """The case only proves something if the boundary step ran (and, with the family's config, clipping fired)."""
    norm = engine.get_global_grad_norm()
    norm_value = float(norm) if norm is not None else None
    ctx.note("global_steps", int(engine.global_steps))
    ctx.note("global_grad_norm", norm_value)
    ctx.note("unscale_and_clip_grads_calls", clip_calls)
    ctx.note("clipping_fired", bool(clip and norm_value is not None and norm_value > clip))
    if engine.global_steps != 1 or clip_calls == 0:
        raise RuntimeError(
            f"the accumulation boundary did not run as planned: global_steps={engine.global_steps}, "
            f"unscale_and_clip_grads calls={clip_calls} (expected 1 step and >= 1 call)"
        )
    if require_clip and (norm_value is None or not norm_value > clip):
        raise RuntimeError(f"clipping did not fire: grad norm {norm_value} <= gradient_clipping {clip}")

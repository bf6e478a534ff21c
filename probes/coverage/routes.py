"""How each `Wrapper` an optimizer_coverage case names wraps the four-part model and its optimizer, the way users
do: FSDP1, FSDP2, DeepSpeed, Accelerate with DeepSpeed or with FSDP, and Composer's Trainer (`composer`). Each
gives the wrapped module, the optimizer that holds the tracked tensors, one step, and the full values by original
name."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

from ds_doctor.plugins import ProbeContext, Wrapper
from ds_doctor.plugins.checks import process_count_agreement
from ds_doctor.plugins.collect import clean_name
from ds_doctor.plugins.requirements import ACCELERATE, DEEPSPEED, TRANSFORMERS
from ds_doctor.probes.coverage.cases import Route
from ds_doctor.probes.coverage.subject import (
    FROZEN,
    INTENDED,
    MICRO_BATCH,
    OUT,
    WIDTH,
    Subject,
    build_model,
    grouped_optimizer,
    make_optimizer,
    subject,
    user_ds_config,
)
from ds_doctor.probes.shared.common import accelerate_session, dist_world_size, refuse_fsdp2_over_gloo_on_gpu
from ds_doctor.probes.shared.common import full_values as gathered_values


@dataclasses.dataclass
class Wrapped:
    module: Any  # where the live parameters are named
    optimizer: Any  # what holds the tracked tensors
    step: Callable[[], None]
    full_values: Callable[[], dict[str, Any]]  # original name -> full value on CPU, the same on every rank


def _batch(ctx: ProbeContext, device: Any) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(100 + ctx.rank)
    x = torch.randn(MICRO_BATCH, WIDTH, generator=generator)
    return x.to(device), torch.randn(MICRO_BATCH, OUT, generator=generator).to(device)


def _plain_step(ctx: ProbeContext, module: Any, optimizer: Any, device: Any) -> Callable[[], None]:
    import torch

    def step() -> None:
        x, y = _batch(ctx, device)
        torch.nn.functional.mse_loss(module(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def _device(ctx: ProbeContext) -> Any:
    import torch

    return torch.device(ctx.device)


def _fsdp1(ctx: ProbeContext, route: Route, cleanup: contextlib.ExitStack) -> Wrapped:
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    ctx.enter("wrap")
    model = build_model()
    optimizer = make_optimizer(model) if route.optimizer_before_wrap else None
    wrapped = FSDP(
        model,
        auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}),
        use_orig_params=route.orig_params,
        device_id=_device(ctx),
    )
    if optimizer is None:
        optimizer = make_optimizer(wrapped)

    def full_values() -> dict[str, Any]:
        with FSDP.summon_full_params(wrapped, writeback=False):
            return {clean_name(n): p.detach().to("cpu", copy=True) for n, p in wrapped.named_parameters()}

    return Wrapped(wrapped, optimizer, _plain_step(ctx, wrapped, optimizer, _device(ctx)), full_values)


def _fsdp2(ctx: ProbeContext, route: Route, cleanup: contextlib.ExitStack) -> Wrapped:
    from torch.distributed.fsdp import fully_shard

    refuse_fsdp2_over_gloo_on_gpu(ctx)
    ctx.enter("wrap")
    model = build_model().to(_device(ctx))
    optimizer = make_optimizer(model) if route.optimizer_before_wrap else None
    for name in ("a", "b", "c", "head"):
        fully_shard(getattr(model, name))
    fully_shard(model)
    if optimizer is None:
        optimizer = make_optimizer(model)

    def full_values() -> dict[str, Any]:
        return {n: p.full_tensor().detach().to("cpu", copy=True) for n, p in model.named_parameters()}

    return Wrapped(model, optimizer, _plain_step(ctx, model, optimizer, _device(ctx)), full_values)


def _engine_values(engine: Any) -> Callable[[], dict[str, Any]]:
    def full_values() -> dict[str, Any]:
        return gathered_values(engine.module)

    return full_values


def _engine_step(ctx: ProbeContext, engine: Any, user: Any = None) -> Callable[[], None]:
    import torch

    def step() -> None:  # one optimizer step: a whole accumulation window
        dtype = torch.bfloat16 if engine.bfloat16_enabled() else torch.float32
        for _ in range(engine.gradient_accumulation_steps()):
            if user is not None:
                loss = user.loss(
                    engine,
                    engine.train_micro_batch_size_per_gpu(),
                    device=engine.device,
                    dtype=dtype,
                    seed=100 + ctx.rank,
                )
            else:
                x, y = _batch(ctx, engine.device)
                loss = torch.nn.functional.mse_loss(engine(x.to(dtype)), y.to(dtype))
            engine.backward(loss)
            engine.step()

    return step


def _ds_config(stage: int) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": MICRO_BATCH,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def _deepspeed(
    ctx: ProbeContext, route: Route, cleanup: contextlib.ExitStack, model: Subject | None = None
) -> Wrapped:
    ctx.require(DEEPSPEED)
    import deepspeed

    model = model or subject(ctx, route.parts, build_model, INTENDED, FROZEN)
    ctx.enter("wrap")
    module = model.build(0)
    config = user_ds_config(ctx, route.user) if route.user is not None else _ds_config(route.stage)
    engine, _, _, _ = deepspeed.initialize(model=module, optimizer=model.optimizer(module), config=config)
    cleanup.callback(engine.destroy)
    return Wrapped(
        engine.module, engine.optimizer, _engine_step(ctx, engine, model.user), _engine_values(engine)
    )


def _accelerate_deepspeed(ctx: ProbeContext, route: Route, cleanup: contextlib.ExitStack) -> Wrapped:
    ctx.require(DEEPSPEED, ACCELERATE, TRANSFORMERS)
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, InitProcessGroupKwargs

    cleanup.enter_context(accelerate_session())
    ctx.enter("prepare")
    accelerator = Accelerator(
        deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=_ds_config(route.stage)),
        kwargs_handlers=[InitProcessGroupKwargs(backend=ctx.backend)],
    )
    model = build_model()
    data = torch.utils.data.TensorDataset(torch.randn(8, WIDTH), torch.randn(8, OUT))
    loader = torch.utils.data.DataLoader(data, batch_size=MICRO_BATCH)
    engine, _, _ = accelerator.prepare(model, make_optimizer(model), loader)
    cleanup.callback(engine.destroy)
    ctx.add_findings(
        process_count_agreement(accelerator.num_processes, dist_world_size(), engine.dp_world_size)
    )
    return Wrapped(engine.module, engine.optimizer, _engine_step(ctx, engine), _engine_values(engine))


def _accelerate_fsdp(ctx: ProbeContext, route: Route, cleanup: contextlib.ExitStack) -> Wrapped:
    ctx.require(ACCELERATE)
    from accelerate import Accelerator
    from accelerate.utils import FullyShardedDataParallelPlugin, InitProcessGroupKwargs

    cleanup.enter_context(accelerate_session())
    ctx.enter("prepare")
    accelerator = Accelerator(
        fsdp_plugin=FullyShardedDataParallelPlugin(use_orig_params=True),
        kwargs_handlers=[InitProcessGroupKwargs(backend=ctx.backend)],
    )
    model = build_model()
    optimizer = make_optimizer(model)  # before prepare: Accelerate's prepare remaps it
    wrapped, optimizer = accelerator.prepare(model, optimizer)
    sharded = any(hasattr(p, "_fqns") or hasattr(p, "full_tensor") for p in wrapped.parameters()) or any(
        "FullyShardedDataParallel" in type(m).__name__ or "FSDP" in type(m).__name__
        for m in wrapped.modules()
    )
    if not sharded:  # measured with accelerate 1.15 on CPU: distributed_type NO, the bare model back
        ctx.skip(
            f"Accelerate ignored the FSDP plugin on {ctx.device_kind} (distributed_type "
            f"{accelerator.distributed_type.value}, prepare returned a plain {type(wrapped).__name__}): there is "
            "no FSDP wrapping to check here; FSDP through Accelerate needs GPUs"
        )

    def full_values() -> dict[str, Any]:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        if isinstance(wrapped, FSDP):
            with FSDP.summon_full_params(wrapped, writeback=False):
                return {clean_name(n): p.detach().to("cpu", copy=True) for n, p in wrapped.named_parameters()}
        return {
            clean_name(n): (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().to("cpu", copy=True)
            for n, p in wrapped.named_parameters()
        }

    def step() -> None:
        import torch

        x, y = _batch(ctx, accelerator.device)
        accelerator.backward(torch.nn.functional.mse_loss(wrapped(x), y))
        optimizer.step()
        optimizer.zero_grad()

    return Wrapped(wrapped, optimizer, step, full_values)


def _composer(ctx: ProbeContext, route: Route, cleanup: contextlib.ExitStack) -> Wrapped:
    from ds_doctor.probes.coverage.composer import composer_trainer

    def optimizer_of(module: Any) -> Any:
        return (grouped_optimizer if route.groups else make_optimizer)(module, route.parts)

    return Wrapped(*composer_trainer(ctx, cleanup, build_model, optimizer_of, _batch(ctx, "cpu")))


#: Route.wrapper -> how the model and its optimizer get wrapped.
WRAPPERS: dict[Wrapper, Callable[[ProbeContext, Route, contextlib.ExitStack], Wrapped]] = {
    Wrapper.FSDP1: _fsdp1,
    Wrapper.FSDP2: _fsdp2,
    Wrapper.DEEPSPEED: _deepspeed,
    Wrapper.ACCELERATE_DEEPSPEED: _accelerate_deepspeed,
    Wrapper.ACCELERATE_FSDP: _accelerate_fsdp,
    Wrapper.COMPOSER: _composer,
}


def wrap(ctx: ProbeContext, route: Route, cleanup: contextlib.ExitStack, model: Subject) -> Wrapped:
    """The model and its optimizer as the route's wrapper leaves them; DeepSpeed's route wraps `model` (the user's
    with `--model`), the others ds-doctor's own four-part model."""
    if route.wrapper is Wrapper.DEEPSPEED:
        return _deepspeed(ctx, route, cleanup, model)
    return WRAPPERS[route.wrapper](ctx, route, cleanup)

"""S3: which parameters the optimizer tracks after a framework wraps the model and the optimizer.

A tiny model in four parts: `a` trainable and in the optimizer; `b` requires grad but is left out
of the optimizer on purpose; `c` frozen; `head` in the optimizer; one AdamW group over `a` and
`head`. Each route wraps it the way users do. Before the step: the set of names (and groups) the
optimizer tracks equals the unwrapped one, and every tracked tensor is a live parameter of the
wrapped model. After one step, with values gathered across ranks: exactly `a` and `head` changed.
The reproduce routes build the optimizer before wrapping where that leaves it with orphans.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
from collections.abc import Callable
from typing import Any

from ds_doctor.plugins import ProbeContext, ProbeSpec, RankOptions, Requirement, Variant
from ds_doctor.plugins.checks import process_count_agreement, step_changes, tracked_live, tracked_set
from ds_doctor.plugins.collect import Tracked, clean_name, optimizer_groups, tracked_names
from ds_doctor.plugins.usersetup import UserConfig
from ds_doctor.probes.coverage.subject import Subject, subject, user_ds_config
from ds_doctor.probes.shared.common import (
    accelerate_session,
    build_deepspeed_ops,
    dist_world_size,
    refuse_fsdp2_over_gloo_on_gpu,
)
from ds_doctor.probes.shared.common import full_values as gathered_values

SPEC = ProbeSpec(
    name="optimizer_coverage",
    scenario="S3",
    description="FSDP1/FSDP2/DeepSpeed/Accelerate wrapping: the optimizer tracks the same parameters, and "
    "exactly they train",
    world_sizes=(1, 2),
    requires=(Requirement("torch", "torch"),),
    timeout_s=180.0,
    deepspeed_ops=True,  # its DeepSpeed routes
    known_issues=("fsdp_optimizer_built_before_wrap", "composer_single_group_rebuild"),
    across_nodes=("fsdp2",),  # also across every node of a multi-node run
)

DEEPSPEED = Requirement("deepspeed", "deepspeed")
ACCELERATE = Requirement("accelerate", "accelerate")
TRANSFORMERS = Requirement("transformers", "transformers")
WIDTH = 8
OUT = 4
MICRO_BATCH = 2
INTENDED = ("a.bias", "a.weight", "head.bias", "head.weight")
FROZEN = ("c.bias", "c.weight")


#: route -> (what the user's code does, reproduce?, level)
@dataclasses.dataclass(frozen=True)
class Route:
    """How the user's code wraps the model and its one-group optimizer."""

    name: str
    what: str  # in words, for the report
    wrapper: str  # a key of WRAPPERS
    optimizer_before_wrap: bool = False
    orig_params: bool = True  # FSDP1's use_orig_params
    stage: int = 2  # DeepSpeed's ZeRO stage
    parts: tuple[str, ...] = ("a", "head")  # the modules whose parameters make the optimizer's one group
    reproduce: bool = False
    level: int = 3
    user: UserConfig | None = None  # the deepspeed route on the user's --deepspeed-config
    groups: bool = False  # one param group per part, not one over them all
    known_issue: str = "fsdp_optimizer_built_before_wrap"  # what a reproduce route shows


_DS_WHAT = "deepspeed.initialize(model, optimizer=AdamW(group)), ZeRO stage {}"
ROUTES = (
    Route("fsdp1-orig", "FSDP1(use_orig_params=True), optimizer built after wrapping", "fsdp1"),
    Route(
        "fsdp1-orig-opt-before-wrap",
        "FSDP1(use_orig_params=True), optimizer built before wrapping",
        "fsdp1",
        optimizer_before_wrap=True,
    ),
    Route(
        "fsdp1-flat",
        "FSDP1(use_orig_params=False), one FlatParameter per Linear, optimizer built after wrapping",
        "fsdp1",
        orig_params=False,
    ),
    Route(
        "fsdp1-flat-opt-before-wrap",
        "FSDP1(use_orig_params=False), optimizer built before wrapping",
        "fsdp1",
        optimizer_before_wrap=True,
        orig_params=False,
        reproduce=True,
    ),
    Route(
        "fsdp2",
        "FSDP2 fully_shard on each Linear and the root, optimizer built after wrapping",
        "fsdp2",
        level=2,
    ),
    Route(
        "fsdp2-opt-before-wrap",
        "FSDP2 fully_shard, optimizer built before wrapping",
        "fsdp2",
        optimizer_before_wrap=True,
        reproduce=True,
    ),
    *(
        Route(
            f"deepspeed-z{stage}",
            _DS_WHAT.format(stage),
            "deepspeed",
            stage=stage,
            level=2 if stage == 2 else 3,
        )
        for stage in (0, 1, 2, 3)
    ),
    Route(
        "deepspeed-z2-frozen-in-group",
        "deepspeed.initialize, ZeRO stage 2, with the frozen c in the optimizer's "
        "group (ZeRO drops it on purpose: an info)",
        "deepspeed",
        parts=("a", "c", "head"),
    ),
    Route(
        "accelerate-deepspeed",
        "Accelerator(deepspeed_plugin) prepare(model, AdamW(group), dataloader), ZeRO 2",
        "accelerate-deepspeed",
    ),
    Route(
        "accelerate-fsdp",
        "Accelerator(fsdp_plugin) prepare(model, AdamW(group)), optimizer built before prepare",
        "accelerate-fsdp",
    ),
    Route(
        "composer",
        "Composer Trainer with FSDP (use_orig_params) and a one-group optimizer over a and head",
        "composer",
        reproduce=True,
        known_issue="composer_single_group_rebuild",
    ),
    Route(
        "composer-two-groups",
        "Composer Trainer with FSDP (use_orig_params), a and head in two param groups "
        "(the remedy of mosaicml/composer#3493)",
        "composer",
        groups=True,
    ),
)


def variants(options: RankOptions) -> list[Variant]:
    routes = list(ROUTES)
    user = options.user_deepspeed_config()
    if user is not None:
        routes.append(
            Route(
                "deepspeed-user-config",
                "deepspeed.initialize(model, optimizer=AdamW(group)) with your DeepSpeed config",
                "deepspeed",
                level=2,
                user=user,
            )
        )
    return [
        Variant(name=route.name, params=route, level=route.level, reproduce=route.reproduce)
        for route in routes
    ]


def setup(ctx: ProbeContext) -> None:
    """DeepSpeed's optimizer ops, once per launch, where DeepSpeed imports. Only its routes need them: a DeepSpeed
    that is installed but does not import (it needs numpy, torch does not) fails those routes, not the FSDP ones."""
    if importlib.util.find_spec("deepspeed") is None:
        return
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        return  # each DeepSpeed route raises the import error itself, classified
    build_deepspeed_ops(ctx)


def build_model(seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential()
    model.add_module("a", torch.nn.Linear(WIDTH, WIDTH))
    model.add_module("act", torch.nn.ReLU())
    model.add_module("b", torch.nn.Linear(WIDTH, WIDTH))
    model.add_module("c", torch.nn.Linear(WIDTH, WIDTH))
    model.add_module("head", torch.nn.Linear(WIDTH, OUT))
    model.c.requires_grad_(False)
    return model


GROUP = ("a", "head")


def make_optimizer(module: Any, parts: tuple[str, ...] = GROUP) -> Any:
    """One AdamW group over the parameters of `parts` (by original name)."""
    import torch

    return torch.optim.AdamW(
        [p for n, p in module.named_parameters() if clean_name(n).split(".")[0] in parts], lr=1e-2
    )


def grouped_optimizer(module: Any, parts: tuple[str, ...]) -> Any:
    """One AdamW group per part: the remedy Composer's single-group rebuild leaves alone."""
    import torch

    return torch.optim.AdamW(
        [
            {"params": [p for n, p in module.named_parameters() if clean_name(n).split(".")[0] == part]}
            for part in parts
        ],
        lr=1e-2,
    )


@dataclasses.dataclass
class Wrapped:
    module: Any  # where the live parameters are named
    optimizer: Any  # what holds the tracked tensors
    step: Callable[[], None]
    full_values: Callable[[], dict[str, Any]]  # original name -> full value on CPU, the same on every rank


def run(ctx: ProbeContext) -> None:
    route: Route = ctx.params
    ctx.note("route", route.what, shown=True)
    if ctx.has_user_model and route.wrapper != "deepspeed":
        ctx.skip(
            f"the {route.wrapper} route wraps ds-doctor's own four-part model only; --model runs on the "
            "deepspeed routes"
        )
    model = subject(ctx, route.parts, build_model, INTENDED, FROZEN)
    reference = model.build(0)
    optimizer = grouped_optimizer(reference, route.parts) if route.groups else model.optimizer(reference)
    before = tracked_names(optimizer_groups(optimizer), reference)
    ctx.note("tracked_before", sorted(before.groups), shown=True)
    with contextlib.ExitStack() as cleanup:
        wrapped = (
            WRAPPERS[route.wrapper](ctx, route, cleanup)
            if route.wrapper != "deepspeed"
            else _deepspeed(ctx, route, cleanup, model)
        )
        ctx.enter("after_wrap")
        after = _tracked_everywhere(ctx, tracked_names(optimizer_groups(wrapped.optimizer), wrapped.module))
        ctx.note("tracked_after", sorted(after.groups), shown=True)
        moved = tracked_set(before.groups, after.groups, model.frozen)
        ctx.check(moved + tracked_live(after))
        ctx.enter("step")
        values = wrapped.full_values()
        wrapped.step()
        changed = sorted(
            name for name, value in wrapped.full_values().items() if not _equal(values[name], value)
        )
        ctx.note("changed_by_step", changed, shown=True)
        missed = step_changes(changed, model.intended)
        # what went wrong for real: an xfail if the checks above caught it first, else a fail
        if route.reproduce:
            ctx.reproduce(
                route.known_issue,
                showed=[finding.message for finding in missed],
                caught=any(f.is_error for f in moved),
            )
        else:
            ctx.check(missed)


def _equal(a: Any, b: Any) -> bool:
    import torch

    return a.shape == b.shape and torch.equal(a, b)


def _tracked_everywhere(ctx: ProbeContext, tracked: Tracked) -> Tracked:
    """A FlatParameter shard holds some names on each rank: the union over ranks is what is tracked."""
    groups: dict[str, int] = {}
    for rank_groups in ctx.all_gather_json(tracked.groups):
        groups.update(rank_groups)
    return Tracked(groups, tracked.orphans)  # orphans are this rank's own


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
    ctx.check(process_count_agreement(accelerator.num_processes, dist_world_size(), engine.dp_world_size))
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
WRAPPERS: dict[str, Callable[[ProbeContext, Route, contextlib.ExitStack], Wrapped]] = {
    "fsdp1": _fsdp1,
    "fsdp2": _fsdp2,
    "deepspeed": _deepspeed,
    "accelerate-deepspeed": _accelerate_deepspeed,
    "accelerate-fsdp": _accelerate_fsdp,
    "composer": _composer,
}

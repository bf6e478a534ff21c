"""S0: Accelerate + DeepSpeed with the optimizer and the scheduler owned by the DeepSpeed config.

The healthy case is the documented order: a tiny model, `DummyOptim`, a dataloader and
`DummyScheduler` go through one `accelerator.prepare`, then a few steps. After prepare no
placeholder may survive, the prepared optimizer and scheduler must wrap the engine's, every layer
must agree on the number of processes, and the lr must follow the config (warm-up to the peak,
then decay). Each reproduce case writes one ordering users get wrong, runs it for real, and
classifies what it raised against the known issues: `xfail` when recognised (reported with the
ordering and its fix), `error` when not, `xpass` when this stack no longer fails that way.
"""

from __future__ import annotations

import copy
import dataclasses
import types
from typing import Any

from ds_doctor.plugins import (
    DeepSpeedConfigNote,
    Finding,
    ProbeContext,
    ProbeSpec,
    RaisedError,
    RankOptions,
    Severity,
    Variant,
)
from ds_doctor.plugins.checks import PreparedFacts, lifecycle_invariants
from ds_doctor.plugins.requirements import ACCELERATE, DEEPSPEED, TORCH, TRANSFORMERS
from ds_doctor.plugins.usersetup import UserConfig, change_findings, fill, trainer_only_auto
from ds_doctor.probes.shared.common import accelerate_session, build_deepspeed_ops, dist_world_size
from ds_doctor.probes.shared.models import HIDDEN, IN_FEATURES, OUT_FEATURES, build_mlp

SPEC = ProbeSpec(
    name="accelerate_deepspeed_lifecycle",
    scenario="S0",
    description="Accelerate + DeepSpeed config-owned optimizer/scheduler: placeholders, orderings, lr, process count",
    world_sizes=(1, 2),
    requires=(
        TORCH,
        DEEPSPEED,
        ACCELERATE,
        # accelerate's DeepSpeed plugin compares the transformers version when it builds the engine
        TRANSFORMERS,
    ),
    timeout_s=180.0,
    known_issues=("acc_ds_placeholder_used_before_prepare",),
)

LR = 1e-3
MISMATCHED_LR = 5e-3
WARMUP = 2
STEPS = 6
MICRO_BATCH = 2


@dataclasses.dataclass(frozen=True)
class Ordering:
    """One way a user's code orders model, optimizer, scheduler and `prepare`, as the knobs `_drive` turns."""

    name: str
    what: str  # the user's code, in words (goes into the report)
    fix: str = ""
    issue: str | None = None  # the known issue it should end in
    stage: int = 2
    optimizer: str = "dummy"  # "dummy": DummyOptim; "torch": a real AdamW
    # "dummy": DummyScheduler; "torch": a LambdaLR on the optimizer, built before prepare
    scheduler: str = "dummy"
    # "one" call with the dataloader; "no-dataloader"; "second": the scheduler in a later call
    prepare: str = "one"
    drop: tuple[str, ...] = ()  # config blocks the user left out ("optimizer", "scheduler")
    config_lr: float | str = "auto"
    dummy_lr: float = LR
    written_schedule: bool = False  # the scheduler's values written out instead of "auto"
    backend_kwargs: bool = True  # InitProcessGroupKwargs(backend=...) passed to Accelerator
    user: UserConfig | None = None  # the user's --deepspeed-config, used through Accelerate as written

    @property
    def reproduce(self) -> bool:
        return self.issue is not None


HEALTHY = Ordering(
    "healthy", "model -> DummyOptim -> DummyScheduler -> one prepare(model, optimizer, dataloader, scheduler)"
)
SECOND_PREPARE_FIX = "prepare the scheduler in the same call as the model and the optimizer"
ORDERINGS = (
    Ordering(
        "scheduler-before-prepare",
        "a torch LR scheduler built on DummyOptim before prepare",
        "build schedulers after prepare on the prepared optimizer, or use DummyScheduler with the config's scheduler",
        "acc_ds_placeholder_used_before_prepare",
        scheduler="torch",
    ),
    Ordering(
        "real-optimizer",
        "a torch AdamW passed to prepare while the DeepSpeed config has an optimizer",
        "use DummyOptim, or remove the optimizer block from the DeepSpeed config",
        "acc_ds_optimizer_defined_twice",
        optimizer="torch",
    ),
    Ordering(
        "real-scheduler",
        "a torch optimizer and LR scheduler passed to prepare while the DeepSpeed config has a scheduler",
        "use DummyScheduler, or remove the scheduler block from the DeepSpeed config",
        "acc_ds_scheduler_defined_twice",
        optimizer="torch",
        scheduler="torch",
        drop=("optimizer",),
    ),
    Ordering(
        "dummy-scheduler-no-config",
        "DummyScheduler with no scheduler in the DeepSpeed config and no lr_scheduler_callable",
        "add a scheduler block to the config or pass lr_scheduler_callable",
        "acc_ds_scheduler_missing",
        drop=("scheduler",),
    ),
    Ordering(
        "dummy-optim-no-config",
        "DummyOptim with no optimizer in the DeepSpeed config",
        "add an optimizer block to the config, or pass a real optimizer",
        "acc_ds_optimizer_defined_twice",
        drop=("optimizer",),
    ),
    Ordering(
        "no-dataloader",
        'prepare(model, optimizer, scheduler) without a dataloader while train_micro_batch_size_per_gpu is "auto"',
        "pass the training dataloader to the same prepare call, or write the micro batch size into the config",
        "acc_ds_auto_batch_needs_dataloader",
        prepare="no-dataloader",
    ),
    Ordering(
        "scheduler-second-prepare",
        "prepare(model, optimizer, dataloader), then prepare(scheduler) in a second call (config values written out)",
        SECOND_PREPARE_FIX,
        "acc_ds_placeholder_used_before_prepare",
        prepare="second",
        written_schedule=True,
    ),
    Ordering(
        "scheduler-second-prepare-auto",
        'prepare(model, optimizer, dataloader), then prepare(scheduler), with "auto" scheduler values',
        SECOND_PREPARE_FIX,
        "acc_ds_auto_value_unfilled",
        prepare="second",
    ),
    Ordering(
        "lr-mismatch",
        f"DummyOptim(lr={MISMATCHED_LR:g}) while the DeepSpeed config sets lr {LR:g}",
        'set the lr in one place ("lr": "auto" in the config)',
        "acc_ds_dummy_lr_overrides_config",
        config_lr=LR,
        dummy_lr=MISMATCHED_LR,
    ),
    Ordering(
        "no-backend-kwargs",
        "Accelerator(...) with no InitProcessGroupKwargs(backend=...) (on CPU: no gloo)",
        'pass kwargs_handlers=[InitProcessGroupKwargs(backend="gloo")] on CPU',
        "acc_cpu_process_count_mismatch",
        backend_kwargs=False,
    ),
)


def variants(options: RankOptions) -> list[Variant]:
    out = [
        Variant(
            name=f"z{stage}-healthy",
            params=dataclasses.replace(HEALTHY, stage=stage),
            level=2 if stage == 2 else 3,
        )
        for stage in (2, 3)
    ]
    user = options.user_deepspeed_config()
    if user is not None:
        out.append(Variant("user-config", params=user_ordering(user), level=2))
    return out + [Variant(name=o.name, params=o, level=3, reproduce=True) for o in ORDERINGS]


def fit(user: UserConfig, world_size: int, device: str) -> Any:
    """The user's config changed only where it cannot run here; its "auto" values are Accelerate's to fill."""
    return fill(user.config, world_size, device, fill_auto=False)


def user_ordering(user: UserConfig) -> Ordering:
    """The recommended order for the user's config: DummyOptim / DummyScheduler where the config defines them, a
    torch optimizer (and a scheduler built on it) where it does not, one prepare with the dataloader."""
    config = user.config
    has_optimizer, has_scheduler = "optimizer" in config, "scheduler" in config
    return dataclasses.replace(
        HEALTHY,
        name="user-config",
        user=user,
        stage=int((config.get("zero_optimization") or {}).get("stage", 0)),
        what="your DeepSpeed config through Accelerate: model -> "
        f"{'DummyOptim' if has_optimizer else 'AdamW'} -> {'DummyScheduler' if has_scheduler else 'a scheduler'}"
        " -> one prepare(model, optimizer, dataloader, scheduler)",
        optimizer="dummy" if has_optimizer else "torch",
        scheduler="dummy" if has_scheduler else ("callable" if has_optimizer else "torch"),
        config_lr=(config.get("optimizer") or {}).get("params", {}).get("lr", "auto"),
    )


def build_config(ordering: Ordering, world_size: int = 1, device: str = "cpu") -> dict[str, Any]:
    """The DeepSpeed config the user wrote, with the `auto` values Accelerate fills (the user's own, made to run
    here: changes only, its `auto` values left to Accelerate)."""
    if ordering.user is not None:
        return {**fit(ordering.user, world_size, device).config, "steps_per_print": 10**9}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": ordering.config_lr, "weight_decay": 0.0}},
        "scheduler": {
            "type": "WarmupDecayLR",
            "params": {
                "warmup_min_lr": 0.0,
                "warmup_max_lr": "auto",
                "warmup_num_steps": "auto",
                "total_num_steps": "auto",
            },
        },
        "zero_optimization": {"stage": ordering.stage},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if ordering.written_schedule:
        config["scheduler"]["params"].update(warmup_max_lr=LR, warmup_num_steps=WARMUP, total_num_steps=STEPS)
    for block in ordering.drop:
        del config[block]
    return config


setup = build_deepspeed_ops  # DeepSpeed's optimizer ops, built or loaded once per launch


def run(ctx: ProbeContext) -> None:
    ordering: Ordering = ctx.params
    if not ordering.backend_kwargs and ctx.world_size == 1:  # an xpass here would read as "not affected"
        ctx.skip(
            "one process: Accelerate's process count and the group's cannot disagree; this trap shows at 2 ranks or "
            "more (its 2-rank case)"
        )
    config = build_config(ordering, ctx.world_size, ctx.device)
    if ordering.user is not None:
        if trainer_only := trainer_only_auto(ordering.user.config):
            ctx.skip(
                f'your DeepSpeed config leaves {", ".join(trainer_only)} as "auto", which only the HF Trainer fills '
                "(from its TrainingArguments); accelerator.prepare refuses them. The routes that fill them ran it "
                "(zero_offload, equivalence's deepspeed-user-config); to run it through raw Accelerate, write values"
            )
        filled = fit(ordering.user, ctx.world_size, ctx.device)
        ctx.note(
            DeepSpeedConfigNote.NOTE,
            {"path": ordering.user.path, "sha256": ordering.user.sha256, "changed": filled.changed},
        )
        ctx.add_findings(change_findings(filled, ctx.rank))
    ctx.note("ordering", ordering.what, shown=True)
    ctx.note("deepspeed_config", copy.deepcopy(config))
    with accelerate_session():
        try:
            facts = _drive(ctx, ordering, config)
        except Exception as exc:
            _diagnose(ctx, exc, ordering)
            return
        ctx.note("prepared", facts.to_dict())
        ctx.add_findings(lifecycle_invariants(facts))
        ctx.reproduce(ordering.issue, showed=_what_showed(ordering, facts))


def _what_showed(ordering: Ordering, facts: PreparedFacts) -> list[str]:
    """The silent orderings: what went wrong although nothing raised."""
    showed: list[str] = []
    peak = max(facts.lr_trace, default=None)
    if isinstance(ordering.config_lr, float) and peak is not None and not _same(peak, ordering.config_lr):
        showed.append(f"the lr peaked at {peak:g}, while the DeepSpeed config sets lr {ordering.config_lr:g}")
    if not ordering.backend_kwargs and facts.num_processes != facts.dist_world_size:
        showed.append(
            f"accelerator.num_processes is {facts.num_processes} on a {facts.dist_world_size}-rank group"
        )
    return showed


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 + 1e-6 * abs(b)


def _diagnose(ctx: ProbeContext, exc: Exception, ordering: Ordering) -> None:
    """An ordering raised: recognised -> an error finding with the ordering and the fix (xfail); else re-raise."""
    raised = RaisedError.of(exc)
    if not raised.hits or ordering.issue is None:
        raise exc
    hit, fix = raised.hits[0], ordering.fix
    ctx.note("raised", raised.traceback)
    ctx.add_findings(
        [
            Finding(
                "prepare_order",
                Severity.ERROR,
                f"{ordering.what}: {raised.summary} (known issue {hit.id})",
                stage=ctx.stage,
                expected="model -> DummyOptim -> DummyScheduler -> one prepare call",
                remedy=f"{fix[0].upper()}{fix[1:]}. {hit.remedy}" if fix else hit.remedy,
            )
        ]
    )
    ctx.reproduce(hit.id, showed=[f"{raised.summary} in stage {ctx.stage!r}"])


def _loader() -> Any:
    import torch

    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(64, IN_FEATURES, generator=generator), torch.randn(64, OUT_FEATURES, generator=generator)
    )
    return torch.utils.data.DataLoader(data, batch_size=MICRO_BATCH)


def _optimizer_and_scheduler(ordering: Ordering, model: Any) -> tuple[Any, Any]:
    """What the user's code builds before prepare."""
    import torch
    from accelerate.utils import DummyOptim, DummyScheduler

    if ordering.optimizer == "torch":
        optimizer: Any = torch.optim.AdamW(model.parameters(), lr=LR)
    else:
        optimizer = DummyOptim(model.parameters(), lr=ordering.dummy_lr)
    if ordering.scheduler == "torch":
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    # a config with an optimizer and no scheduler: the scheduler is built late
    if ordering.scheduler == "callable":
        return optimizer, DummyScheduler(
            optimizer,
            lr_scheduler_callable=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0),
        )
    return optimizer, DummyScheduler(optimizer, total_num_steps=STEPS, warmup_num_steps=WARMUP)


def _prepare(
    ctx: ProbeContext, ordering: Ordering, accelerator: Any, parts: tuple[Any, Any, Any, Any]
) -> tuple:
    """`accelerator.prepare` the way the ordering calls it; (model, optimizer, loader, scheduler) back."""
    model, optimizer, loader, scheduler = parts
    ctx.enter("prepare")
    if ordering.prepare == "no-dataloader":
        model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    elif ordering.prepare == "second":
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        ctx.enter("second prepare")
        scheduler = accelerator.prepare(scheduler)
    else:
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
    return model, optimizer, loader, scheduler


def _train(
    ctx: ProbeContext, accelerator: Any, engine: Any, optimizer: Any, loader: Any, scheduler: Any
) -> list[float]:
    """A few steps; the lr each ran with."""
    import torch

    ctx.enter("train")
    trace = []
    for step, (x, y) in enumerate(loader):
        if step >= STEPS:
            break
        trace.append(float(optimizer.param_groups[0]["lr"]))
        accelerator.backward(torch.nn.functional.mse_loss(engine(x.to(engine.device)), y.to(engine.device)))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return trace


def _drive(ctx: ProbeContext, ordering: Ordering, config: dict[str, Any]) -> PreparedFacts:
    """Run the user's code for `ordering` up to and through a few steps; collect what prepare returned."""
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, DummyOptim, InitProcessGroupKwargs

    ctx.enter("Accelerator")
    handlers = [InitProcessGroupKwargs(backend=ctx.backend)] if ordering.backend_kwargs else []
    accelerator = Accelerator(
        deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=copy.deepcopy(config)), kwargs_handlers=handlers
    )
    model = build_mlp()
    # the user's "auto" bucket sizes: Accelerate reads them off an HF model's config
    if ordering.user is not None:
        model.config = types.SimpleNamespace(hidden_size=HIDDEN)
    ctx.enter("build optimizer and scheduler")
    optimizer, scheduler = _optimizer_and_scheduler(ordering, model)
    used_dummy = isinstance(optimizer, DummyOptim)
    engine, optimizer, loader, scheduler = _prepare(
        ctx, ordering, accelerator, (model, optimizer, _loader(), scheduler)
    )
    resolved = accelerator.state.deepspeed_plugin.deepspeed_config
    trace = _train(ctx, accelerator, engine, optimizer, loader, scheduler)
    facts = PreparedFacts(
        optimizer_class=type(optimizer).__name__,
        optimizer_inner_class=_inner_name(optimizer, "optimizer"),
        scheduler_class=type(scheduler).__name__,
        scheduler_inner_class=_inner_name(scheduler, "scheduler"),
        optimizer_wraps_engine=getattr(optimizer, "optimizer", None)
        is getattr(engine, "optimizer", object()),
        scheduler_wraps_engine=getattr(scheduler, "scheduler", None)
        is getattr(engine, "lr_scheduler", object()),
        num_processes=int(accelerator.num_processes),
        dist_world_size=dist_world_size(),
        dp_world_size=getattr(engine, "dp_world_size", None),
        config_lr=config.get("optimizer", {}).get("params", {}).get("lr"),
        dummy_lr=ordering.dummy_lr if used_dummy else None,
        resolved_lr=_number(resolved.get("optimizer", {}).get("params", {}).get("lr")),
        warmup_max_lr=_number(resolved.get("scheduler", {}).get("params", {}).get("warmup_max_lr")),
        lr_trace=tuple(trace),
        decays=resolved.get("scheduler", {}).get("type") in ("WarmupDecayLR", "WarmupCosineLR"),
    )
    engine.destroy()
    return facts


def _inner_name(wrapper: Any, attr: str) -> str | None:
    inner = getattr(wrapper, attr, None)
    return type(inner).__name__ if inner is not None else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None

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
from typing import Any

from doctor import known_issues
from doctor.context import ProbeContext
from doctor.invariants import ERROR, Finding
from doctor.lifecycle import PreparedFacts, lifecycle_invariants
from doctor.worker import TRACEBACK_CHARS
from probes import zero_offload
from probes.base import ProbeSpec, Requirement, Variant
from probes.common import accelerate_session, dist_world_size
from probes.models import IN_FEATURES, OUT_FEATURES, build_mlp

SPEC = ProbeSpec(
    name="accelerate_deepspeed_lifecycle",
    scenario="S0",
    description="Accelerate + DeepSpeed config-owned optimizer/scheduler: placeholders, orderings, lr, process count",
    world_sizes=(1, 2),
    requires=(Requirement("torch", "torch"), Requirement("deepspeed", "deepspeed"),
              Requirement("accelerate", "accelerate"),
              # accelerate's DeepSpeed plugin compares the transformers version when it builds the engine
              Requirement("transformers", "transformers")),
    timeout_s=180.0,
    known_issues=("acc_ds_placeholder_used_before_prepare",),
)

LR = 1e-3
MISMATCHED_LR = 5e-3
WARMUP = 2
STEPS = 6
MICRO_BATCH = 2

#: ordering -> (what the user's code does, the fix, the known issue it should end in)
ORDERINGS: dict[str, tuple[str, str, str | None]] = {
    "healthy": ("model -> DummyOptim -> DummyScheduler -> one prepare(model, optimizer, dataloader, scheduler)",
                "", None),
    "scheduler-before-prepare": (
        "a torch LR scheduler built on DummyOptim before prepare",
        "build schedulers after prepare on the prepared optimizer, or use DummyScheduler with the config's scheduler",
        "acc_ds_placeholder_used_before_prepare"),
    "real-optimizer": (
        "a torch AdamW passed to prepare while the DeepSpeed config has an optimizer",
        "use DummyOptim, or remove the optimizer block from the DeepSpeed config", "acc_ds_optimizer_defined_twice"),
    "real-scheduler": (
        "a torch optimizer and LR scheduler passed to prepare while the DeepSpeed config has a scheduler",
        "use DummyScheduler, or remove the scheduler block from the DeepSpeed config", "acc_ds_scheduler_defined_twice"),
    "dummy-scheduler-no-config": (
        "DummyScheduler with no scheduler in the DeepSpeed config and no lr_scheduler_callable",
        "add a scheduler block to the config or pass lr_scheduler_callable", "acc_ds_scheduler_missing"),
    "dummy-optim-no-config": (
        "DummyOptim with no optimizer in the DeepSpeed config",
        "add an optimizer block to the config, or pass a real optimizer", "acc_ds_optimizer_defined_twice"),
    "no-dataloader": (
        "prepare(model, optimizer, scheduler) without a dataloader while train_micro_batch_size_per_gpu is \"auto\"",
        "pass the training dataloader to the same prepare call, or write the micro batch size into the config",
        "acc_ds_auto_batch_needs_dataloader"),
    "scheduler-second-prepare": (
        "prepare(model, optimizer, dataloader), then prepare(scheduler) in a second call (config values written out)",
        "prepare the scheduler in the same call as the model and the optimizer",
        "acc_ds_placeholder_used_before_prepare"),
    "scheduler-second-prepare-auto": (
        "prepare(model, optimizer, dataloader), then prepare(scheduler), with \"auto\" scheduler values",
        "prepare the scheduler in the same call as the model and the optimizer", "acc_ds_auto_value_unfilled"),
    "lr-mismatch": (
        f"DummyOptim(lr={MISMATCHED_LR:g}) while the DeepSpeed config sets lr {LR:g}",
        "set the lr in one place (\"lr\": \"auto\" in the config)", "acc_ds_dummy_lr_overrides_config"),
    "no-backend-kwargs": (
        "Accelerator(...) with no InitProcessGroupKwargs(backend=...) (on CPU: no gloo)",
        "pass kwargs_handlers=[InitProcessGroupKwargs(backend=\"gloo\")] on CPU", "acc_cpu_process_count_mismatch"),
}


def variants() -> list[Variant]:
    out = [Variant(name=f"z{stage}-healthy", params={"stage": stage, "ordering": "healthy"}, level=2 if stage == 2 else 3)
           for stage in (2, 3)]
    out += [Variant(name=name, params={"stage": 2, "ordering": name}, level=3, reproduce=True)
            for name in ORDERINGS if name != "healthy"]
    return out


def build_config(ordering: str, stage: int) -> dict[str, Any]:
    """The DeepSpeed config the user wrote, with the `auto` values Accelerate fills."""
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": 0.0}},
        "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": "auto",
                                                          "warmup_num_steps": "auto", "total_num_steps": "auto"}},
        "zero_optimization": {"stage": stage},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if ordering == "real-scheduler":
        del config["optimizer"]
    if ordering == "dummy-optim-no-config":
        del config["optimizer"]
    if ordering == "dummy-scheduler-no-config":
        del config["scheduler"]
    if ordering == "scheduler-second-prepare":
        config["scheduler"]["params"].update(warmup_max_lr=LR, warmup_num_steps=WARMUP, total_num_steps=STEPS)
    if ordering == "lr-mismatch":
        config["optimizer"]["params"]["lr"] = LR
    return config


setup = zero_offload.setup  # DeepSpeed's optimizer ops, built or loaded once per launch


def run(ctx: ProbeContext) -> None:
    ordering, stage = str(ctx.params["ordering"]), int(ctx.params["stage"])
    what, fix, issue_id = ORDERINGS[ordering]
    config = build_config(ordering, stage)
    ctx.note("ordering", what)
    ctx.note("deepspeed_config", copy.deepcopy(config))
    with accelerate_session():
        try:
            facts = _drive(ctx, ordering, config)
        except Exception as exc:
            _diagnose(ctx, exc, what, fix, issue_id)
            return
        ctx.note("prepared", facts.to_dict())
        ctx.check(lifecycle_invariants(facts))
        if ordering == "lr-mismatch" and facts.lr_trace and not _same(max(facts.lr_trace), LR):
            ctx.showed(f"the lr peaked at {max(facts.lr_trace):g}, while the DeepSpeed config sets lr {LR:g}")
        if ordering == "no-backend-kwargs" and facts.num_processes != facts.dist_world_size:
            ctx.showed(f"accelerator.num_processes is {facts.num_processes} on a {facts.dist_world_size}-rank group")
        if issue_id:
            ctx.known_issue(issue_id, shown=bool(ctx.shown))


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 + 1e-6 * abs(b)


def _diagnose(ctx: ProbeContext, exc: Exception, what: str, fix: str, issue_id: str | None) -> None:
    """An ordering raised: recognised -> an error finding with the ordering and the fix (xfail); else re-raise."""
    raised = known_issues.RaisedError.of(exc)
    if not raised.hits or issue_id is None:
        raise exc
    hit = raised.hits[0]
    ctx.note("raised", raised.traceback[-TRACEBACK_CHARS:])
    ctx.check([Finding("prepare_order", ERROR, f"{what}: {raised.summary} (known issue {hit.id})",
                       stage=ctx.stage, expected="model -> DummyOptim -> DummyScheduler -> one prepare call",
                       remedy=f"{fix[0].upper()}{fix[1:]}. {hit.remedy}" if fix else hit.remedy)])
    ctx.showed(f"{raised.summary} in stage {ctx.stage!r}")
    ctx.known_issue(hit.id, shown=True)


def _drive(ctx: ProbeContext, ordering: str, config: dict[str, Any]) -> PreparedFacts:
    """Run the user's code for `ordering` up to and through a few steps; collect what prepare returned."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, DummyOptim, DummyScheduler, InitProcessGroupKwargs

    ctx.enter("Accelerator")
    handlers = [] if ordering == "no-backend-kwargs" else [InitProcessGroupKwargs(backend=ctx.backend)]
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=copy.deepcopy(config)),
                              kwargs_handlers=handlers)
    model = build_mlp()
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(64, IN_FEATURES, generator=generator),
                                          torch.randn(64, OUT_FEATURES, generator=generator))
    loader = torch.utils.data.DataLoader(data, batch_size=MICRO_BATCH)
    dummy_lr = MISMATCHED_LR if ordering == "lr-mismatch" else LR

    ctx.enter("build optimizer and scheduler")
    if ordering in ("real-optimizer", "real-scheduler"):
        optimizer: Any = torch.optim.AdamW(model.parameters(), lr=LR)
    else:
        optimizer = DummyOptim(model.parameters(), lr=dummy_lr)
    used_dummy = isinstance(optimizer, DummyOptim)
    if ordering in ("scheduler-before-prepare", "real-scheduler"):
        scheduler: Any = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    else:
        scheduler = DummyScheduler(optimizer, total_num_steps=STEPS, warmup_num_steps=WARMUP)

    ctx.enter("prepare")
    if ordering == "no-dataloader":
        model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    elif ordering.startswith("scheduler-second-prepare"):
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        ctx.enter("second prepare")
        scheduler = accelerator.prepare(scheduler)
    else:
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

    engine = model
    resolved = accelerator.state.deepspeed_plugin.deepspeed_config
    ctx.enter("train")
    trace = []
    for step, (x, y) in enumerate(loader):
        if step >= STEPS:
            break
        trace.append(float(optimizer.param_groups[0]["lr"]))
        loss = torch.nn.functional.mse_loss(model(x.to(engine.device)), y.to(engine.device))
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    facts = PreparedFacts(
        optimizer_class=type(optimizer).__name__,
        optimizer_inner_class=_inner_name(optimizer, "optimizer"),
        scheduler_class=type(scheduler).__name__,
        scheduler_inner_class=_inner_name(scheduler, "scheduler"),
        optimizer_wraps_engine=getattr(optimizer, "optimizer", None) is getattr(engine, "optimizer", object()),
        scheduler_wraps_engine=getattr(scheduler, "scheduler", None) is getattr(engine, "lr_scheduler", object()),
        num_processes=int(accelerator.num_processes),
        dist_world_size=dist_world_size(),
        dp_world_size=getattr(engine, "dp_world_size", None),
        config_lr=config.get("optimizer", {}).get("params", {}).get("lr"),
        dummy_lr=dummy_lr if used_dummy else None,
        resolved_lr=_number(resolved.get("optimizer", {}).get("params", {}).get("lr")),
        warmup_max_lr=_number(resolved.get("scheduler", {}).get("params", {}).get("warmup_max_lr")),
        lr_trace=tuple(trace),
    )
    engine.destroy()
    return facts


def _inner_name(wrapper: Any, attr: str) -> str | None:
    inner = getattr(wrapper, attr, None)
    return type(inner).__name__ if inner is not None else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None

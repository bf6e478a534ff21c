"""S1: DeepSpeed's parameter-name map and the optimizer's parameters against the module's live
parameters, before a checkpoint save; then the save, and a reload, for real.

A tiny model with a frozen embedding (`emb`) and a trainable head (`head`) goes through
`deepspeed.initialize` at ZeRO stages 0-3. The healthy case places the model first (the
recommended order) and must round-trip a checkpoint into a fresh engine with equal values.
Each reproduce case replaces parameter objects after initialize by one route users hit, then
runs the identity invariants *before* saving, and then shows what the stack does with it: a
training step (does the live head still train?), `save_checkpoint` (does it raise?), the saved
file (does it hold data?), and a reload into a fresh engine (do the values come back?).

Outcome of a reproduce case: `xfail` when something went wrong and the invariants had flagged
it before the save; `fail` when something went wrong that they missed; `xpass` when nothing
went wrong (the installed stack is not affected on that path; a stale map that nothing read is
kept as a warning).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ds_doctor.plugins import (
    DeepSpeedConfigNote,
    Finding,
    ModelNote,
    ProbeContext,
    ProbeSpec,
    RaisedError,
    RankOptions,
    Severity,
    Variant,
)
from ds_doctor.plugins.checks import identity_invariants
from ds_doctor.plugins.requirements import ACCELERATE, DEEPSPEED, TORCH
from ds_doctor.plugins.usersetup import UserConfig, change_findings, fill, route_optimizer, trainer_optimizer
from ds_doctor.probes.shared.common import build_deepspeed_ops, full_values
from ds_doctor.probes.shared.models import build_frozen_model, token_batch

SPEC = ProbeSpec(
    name="frozen_param_names",
    scenario="S1",
    description="ZeRO 0-3: parameters replaced after initialize vs the engine's name map, the optimizer and "
    "checkpoints",
    world_sizes=(1, 2),
    requires=(TORCH, DEEPSPEED, ACCELERATE),
    timeout_s=180.0,
    known_issues=("ds_frozen_param_not_in_param_names",),
)

#: How each route replaces parameter objects after initialize (the text goes into the report).
ROUTES = {
    "healthy": "model placed with accelerate.dispatch_model before deepspeed.initialize (the recommended order)",
    "dispatch-disk": "accelerate.dispatch_model(module, device_map={'emb': 'disk', 'head': <device>}) after initialize",
    "set-tensor": "accelerate.utils.set_module_tensor_to_device(module, 'emb.weight', <device>, value=...) "
    "after initialize",
    "set-tensor-trainable": "set_module_tensor_to_device(module, 'head.weight', <device>, value=...) after initialize",
    "assign": "module.load_state_dict(state_dict, assign=True) after initialize",
}
LEVEL2 = ("z2-healthy", "z2-dispatch-disk")
MICRO_BATCH = 2
TAG = "s1"
DEFAULT_ISSUE = SPEC.known_issues[0]


@dataclasses.dataclass(frozen=True)
class S1Case:
    stage: int
    route: str  # a key of ROUTES
    user: UserConfig | None = None  # the healthy route on the user's --deepspeed-config

    @property
    def reproduce(self) -> bool:
        return self.route != "healthy"


def variants(options: RankOptions) -> list[Variant]:
    cases = [S1Case(stage, route) for stage in (0, 1, 2, 3) for route in ROUTES]
    out = [
        Variant(
            name=f"z{c.stage}-{c.route}",
            params=c,
            level=2 if f"z{c.stage}-{c.route}" in LEVEL2 else 3,
            reproduce=c.reproduce,
        )
        for c in cases
    ]
    user = options.user_deepspeed_config()
    if user is not None:
        stage = int((user.config.get("zero_optimization") or {}).get("stage", 0))
        out.append(Variant("user-config-healthy", S1Case(stage, "healthy", user), level=2))
    return out


def case_config(ctx: ProbeContext, params: S1Case) -> dict[str, Any]:
    """The family's own config for the stage, or the user's made runnable here (fills and changes in the notes)."""
    if params.user is None:
        return build_config(params.stage)
    filled = fill(params.user.config, ctx.world_size, ctx.device)
    trainer_optimizer(filled)  # an HF-Trainer-style config: the Trainer's optimizer, said
    ctx.note(
        DeepSpeedConfigNote.NOTE,
        {
            "path": params.user.path,
            "sha256": params.user.sha256,
            "filled": filled.filled,
            "changed": filled.changed,
            "left_to_deepspeed": filled.unfilled,
        },
    )
    ctx.add_findings(change_findings(filled, ctx.rank))
    return {**filled.config, "steps_per_print": 10**9, "wall_clock_breakdown": False}


def build_config(stage: int) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": MICRO_BATCH,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
        "zero_optimization": {"stage": stage},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


setup = build_deepspeed_ops  # the same DeepSpeed optimizer ops, built or loaded once per launch


@dataclasses.dataclass
class Problem:
    """Something that went wrong for real after the invariants ran."""

    what: str
    issue: str | None = None


def run(ctx: ProbeContext) -> None:
    params: S1Case = ctx.params
    route, reproduce = params.route, params.reproduce
    ctx.note("route", ROUTES[route], shown=True)
    config = case_config(ctx, params)
    ctx.note("deepspeed_config", config)
    if route == "dispatch-disk" and ctx.has_user_model:
        ctx.skip(
            "the dispatch-disk route sends ds-doctor's own `emb` module to disk: it runs on the tiny model only"
        )
    engines: list[Any] = []
    try:
        engine = _initialize(ctx, config, seed=0, engines=engines)
        # the user's model makes the batches and the loss (`--model`); None: the tiny one
        batches = ctx.user_model()
        _train_step(engine, ctx, seed=0, user=batches)
        if reproduce:
            ctx.enter(f"replace: {route}")
            try:
                _replace(engine.module, route, ctx)
            except Exception as exc:  # the stack refused the route up front: the silent state cannot arise
                ctx.note("route_refused", f"{type(exc).__name__}: {exc}"[:500], shown=True)
                ctx.reproduce(DEFAULT_ISSUE)  # it did not show
                return
        named = list(engine.module.named_parameters())
        records = ctx.snapshot("before_save", module=engine.module)
        caught = identity_invariants(named, engine, records, rank=ctx.rank, stage="before_save")
        problems = _consequences(ctx, engine, named, config, engines, batches)
        _conclude(ctx, reproduce, caught, problems)
    finally:
        for engine in engines:
            engine.destroy()


def _conclude(ctx: ProbeContext, reproduce: bool, caught: list[Finding], problems: list[Problem]) -> None:
    if not reproduce:
        ctx.add_findings(caught)
        ctx.add_findings(
            Finding("checkpoint_round_trip", Severity.ERROR, p.what, stage="after_reload") for p in problems
        )
        return
    if problems:
        ctx.add_findings(caught)
        issue = next((p.issue for p in problems if p.issue), DEFAULT_ISSUE)
        ctx.reproduce(issue, showed=[p.what for p in problems])
        return
    latent = " (latent here: the step, the save and the reload all came out right)"
    ctx.add_findings(
        dataclasses.replace(f, severity=Severity.WARNING, message=f.message + latent) if f.is_error else f
        for f in caught
    )
    ctx.reproduce(DEFAULT_ISSUE)


def _initialize(ctx: ProbeContext, config: dict[str, Any], *, seed: int, engines: list[Any]) -> Any:
    import deepspeed
    from accelerate import dispatch_model

    ctx.enter("initialize")
    user = ctx.user_model(seed=seed)
    if user is not None:
        model = user.module
        ctx.note("frozen", user.freeze(ctx.options.freeze))
        ctx.note(ModelNote.NOTE, user.describe())
    else:
        model = build_frozen_model(seed=seed)
    dispatch_model(model, device_map={"": _map_device(ctx.device)})  # place first, then initialize
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = route_optimizer(config, trainable)  # a user config without one: the Trainer's
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=None if optimizer else trainable, optimizer=optimizer, config=config
    )
    engines.append(engine)
    return engine


def _map_device(device: str) -> str | int:
    """accelerate device-map value for a torch device string."""
    return int(device.split(":")[1]) if device.startswith("cuda:") else device


def _train_step(engine: Any, ctx: ProbeContext, *, seed: int, user: Any = None) -> None:
    import torch

    ctx.enter(f"train step {seed}")
    # one optimizer step: a whole accumulation window
    for micro in range(engine.gradient_accumulation_steps()):
        micro_seed = 1000 * ctx.rank + 100 * seed + micro
        if user is not None:
            dtype = torch.bfloat16 if engine.bfloat16_enabled() else torch.float32
            loss = user.loss(
                engine,
                engine.train_micro_batch_size_per_gpu(),
                device=engine.device,
                dtype=dtype,
                seed=micro_seed,
            )
        else:
            ids, y = token_batch(
                MICRO_BATCH, device=engine.device, seed=micro_seed if micro else 1000 * ctx.rank + seed
            )
            loss = torch.nn.functional.mse_loss(engine(ids), y)
        engine.backward(loss)
        engine.step()


def _replace(module: Any, route: str, ctx: ProbeContext) -> None:
    """Swap parameter objects the way `route` does; values are the real (gathered) ones."""
    values = full_values(module)
    if route == "dispatch-disk":
        from accelerate import dispatch_model

        offload = ctx.scratch_dir() / f"offload-rank{ctx.rank}"
        dispatch_model(
            module, device_map={"emb": "disk", "head": _map_device(ctx.device)}, offload_dir=str(offload)
        )
    elif route in ("set-tensor", "set-tensor-trainable"):
        from accelerate.utils import set_module_tensor_to_device

        frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
        trainable = [n for n, p in module.named_parameters() if p.requires_grad]
        # emb.weight / head.weight on the tiny model
        name = frozen[0] if route == "set-tensor" else trainable[-1]
        set_module_tensor_to_device(module, name, ctx.device, value=values[name])
    elif route == "assign":
        module.load_state_dict(values, assign=True)
    else:  # pragma: no cover - variants() only makes the routes above
        raise ValueError(f"unknown route {route!r}")


def _differs(a: Any, b: Any) -> bool | None:
    """Whether two values differ; None where either has no data (meta)."""
    import torch

    if a.device.type == "meta" or b.device.type == "meta" or a.shape != b.shape:
        return None if "meta" in (a.device.type, b.device.type) else True
    return not torch.equal(a.float(), b.float())


def _consequences(
    ctx: ProbeContext,
    engine: Any,
    named: list[tuple[str, Any]],
    config: dict[str, Any],
    engines: list[Any],
    batches: Any,
) -> list[Problem]:
    """Train, save, read the file, reload: what actually went wrong, in order. A stage that went wrong ends the
    chain, since the later ones would only report its echo."""
    problems: list[Problem] = []
    expected = _train_and_judge(ctx, engine, named, batches, problems)
    save_dir = _save_and_read(ctx, engine, problems)
    if save_dir is not None:
        _reload_and_compare(ctx, config, engines, save_dir, expected, problems)
    return problems


def _train_and_judge(
    ctx: ProbeContext, engine: Any, named: list[tuple[str, Any]], batches: Any, problems: list[Problem]
) -> dict[str, Any]:
    """One training step after the replacement, judged per parameter; returns the values a checkpoint should
    hold (those before the step where it raised)."""
    _step_past_warmup(ctx, engine, batches, problems)
    before = full_values(engine.module)
    lr = _current_lr(engine)
    if not _attempt(
        ctx, problems, "the training step after it", lambda: _train_step(engine, ctx, seed=1, user=batches)
    ):
        return before
    after = full_values(engine.module)
    _judge_step(ctx, named, before, after, lr, problems)
    return after


def _step_past_warmup(ctx: ProbeContext, engine: Any, batches: Any, problems: list[Problem]) -> None:
    """A warmup scheduler's first steps have lr 0: step past them (three at most), or nothing can show."""
    for extra in range(3):
        if _current_lr(engine) != 0:
            break
        if not _attempt(
            ctx,
            problems,
            "a warmup step",
            functools.partial(_train_step, engine, ctx, seed=10 + extra, user=batches),
        ):
            break


def _judge_step(
    ctx: ProbeContext,
    named: list[tuple[str, Any]],
    before: dict[str, Any],
    after: dict[str, Any],
    lr: float | None,
    problems: list[Problem],
) -> None:
    """A trainable parameter the step left unchanged no longer trains, a frozen one it changed is not frozen;
    an unchanged one whose update could not show (lr 0, below the dtype's resolution) is noted, not judged."""
    unjudged = []
    for name, param in named:
        changed = _differs(before[name], after[name])
        if param.requires_grad and changed is False and not _visible(before[name], lr):
            unjudged.append(name)  # a zero lr (warmup) or an update below the dtype's resolution
        elif param.requires_grad and changed is False:
            problems.append(
                Problem(
                    f"{name} is trainable, but a training step left it unchanged: it no longer "
                    "trains (the optimizer updates another object)",
                    "ds_replaced_trainable_param_not_trained",
                )
            )
        if not param.requires_grad and changed:
            problems.append(Problem(f"{name} is frozen, but a training step changed it"))
    if unjudged:
        ctx.note("not_judged_trained", {"lr": lr, "parameters": unjudged})


def _save_and_read(ctx: ProbeContext, engine: Any, problems: list[Problem]) -> Path | None:
    """save_checkpoint, then what the files hold: the checkpoint's directory, or None where the save raised or
    wrote meta tensors (nothing to reload)."""
    save_dir = ctx.scratch_dir()
    saved = _attempt(ctx, problems, "save_checkpoint", lambda: engine.save_checkpoint(str(save_dir), tag=TAG))
    _barrier()
    if not saved:
        return None
    ctx.enter("read checkpoint")
    empty = meta_entries(save_dir / TAG)
    ctx.note("checkpoint_files", sorted(p.name for p in (save_dir / TAG).glob("*.pt")))
    if empty:
        problems.append(
            Problem(
                f"save_checkpoint wrote meta tensors (no data) for {', '.join(empty)}: the checkpoint "
                "silently lost those weights",
                "ds_ckpt_meta_params_saved",
            )
        )
        return None
    return save_dir


def _reload_and_compare(
    ctx: ProbeContext,
    config: dict[str, Any],
    engines: list[Any],
    save_dir: Path,
    expected: dict[str, Any],
    problems: list[Problem],
) -> None:
    """Load the checkpoint into a fresh engine (other initial values) and compare with what was saved."""
    fresh = _initialize(ctx, config, seed=1, engines=engines)
    ctx.enter("load_checkpoint")
    if not _attempt(
        ctx,
        problems,
        "load_checkpoint into a fresh engine",
        lambda: fresh.load_checkpoint(str(save_dir), tag=TAG),
    ):
        return
    ctx.enter("compare reloaded values")
    reloaded = full_values(fresh.module)
    for name, value in expected.items():
        if value.device.type == "meta":
            continue  # no value to compare with; no_meta_params reported it
        if reloaded.get(name) is None or _differs(value, reloaded[name]) is not False:
            problems.append(
                Problem(f"{name} did not come back from the checkpoint with the value it was saved with")
            )
    ctx.note("reloaded", sorted(reloaded))


def _current_lr(engine: Any) -> float | None:
    """The lr the next optimizer step uses (a warmup scheduler starts at 0); None where the engine cannot say."""
    try:
        return float(engine.get_lr()[0])
    except Exception:  # no scheduler, or an optimizer DeepSpeed cannot read it from
        return None


def _visible(value: Any, lr: float | None) -> bool:
    """Whether an Adam-like step of size `lr` can show in a tensor of `value`'s dtype and magnitude: an update
    below half a unit in the last place is rounded away (a bf16 norm weight of 1.0 keeps 1.0 at lr 3e-4)."""
    import torch

    if lr is None:
        return True
    if value.device.type == "meta" or lr == 0:
        return lr != 0
    resolution = torch.finfo(value.dtype).eps * float(value.abs().max()) if value.is_floating_point() else 0.0
    return lr > resolution / 2


def _attempt(ctx: ProbeContext, problems: list[Problem], what: str, action: Callable[[], object]) -> bool:
    """Run `action`; a raise is a problem, classified against the known issues."""
    try:
        action()
        return True
    except Exception as exc:
        raised = RaisedError.of(exc)
        ctx.note(f"raised in {what}", raised.traceback)
        problems.append(
            Problem(f"{what} raised {raised.summary}", raised.hits[0].id if raised.hits else None)
        )
        return False


def meta_entries(tag_dir: Path) -> list[str]:
    """Names of tensors stored on meta (no data) in a DeepSpeed checkpoint's model-state files."""
    import torch

    from ds_doctor.plugins.collect import iter_nested_tensors

    empty: list[str] = []
    for path in sorted(tag_dir.glob("*model_states.pt")):
        state = torch.load(path, map_location="cpu", weights_only=False)
        for key in ("module", "frozen_param_fragments"):
            for name, tensor in iter_nested_tensors(state.get(key) or {}, key):
                if tensor.device.type == "meta":
                    empty.append(f"{path.name}:{name}")
    return empty


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()

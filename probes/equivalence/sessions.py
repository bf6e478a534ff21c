"""How an equivalence case opens its route: the family's settings (or the user's DeepSpeed / Accelerate config made
runnable here) as a `Hyper` the reference reproduces, the packages the route needs, and the session that trains it
(`ds_doctor.probes.equivalence.routes`). Shared by the case (`ds_doctor.probes.equivalence.probe`) and the resumed
process (`ds_doctor.probes.equivalence.child`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ds_doctor.plugins import AccelerateConfigNote, DeepSpeedConfigNote, ProbeContext, Wrapper
from ds_doctor.plugins.requirements import ACCELERATE, DEEPSPEED, TRANSFORMERS
from ds_doctor.plugins.usersetup import (
    TRAINER_OPTIMIZER,
    UserConfig,
    accelerate_config,
    change_findings,
    fill,
    route_optimizer,
    trainer_optimizer,
)
from ds_doctor.probes.equivalence.cases import Route
from ds_doctor.probes.equivalence.knobs import MOMENTUM, TORCH_SCHEDULES, Knobs
from ds_doctor.probes.equivalence.routes import (
    SESSIONS,
    AccelerateSession,
    DeepSpeedSession,
    Session,
    torch_schedule,
)
from ds_doctor.probes.equivalence.subject import Hyper, Subject
from ds_doctor.probes.shared.common import require_deepspeed_ops


def open_session(ctx: ProbeContext, route: Route, subject: Subject) -> Session:
    """The route built for this case: its settings (the family's, or the user's config made runnable here), the
    packages it needs, and the session that trains it."""
    if route.knobs is not None:
        return _matrix_session(ctx, route, subject)
    if route.wrapper in SESSIONS:
        return SESSIONS[route.wrapper](ctx, route, subject, Hyper())
    if route.wrapper is Wrapper.DEEPSPEED:
        ctx.require(DEEPSPEED)
        require_deepspeed_ops(ctx)
        config, client = deepspeed_config(ctx, route)
        hyper = (
            hyper_from_config(ctx, config)
            if route.user is not None
            else _route_hyper(route, "torch" if client is not None else "deepspeed")
        )
        ctx.note("deepspeed_config", config)
        return DeepSpeedSession(ctx, route, subject, hyper, config, client)
    ctx.require(ACCELERATE, TRANSFORMERS)  # Accelerate's DeepSpeed plugin checks the transformers version
    if route.user_accelerate:
        return _user_accelerate(ctx, route, subject)
    schedule = warmup if route.resume else None
    if route.wrapper is Wrapper.ACCELERATE_DEEPSPEED:
        ctx.require(DEEPSPEED)
        require_deepspeed_ops(ctx)
        hyper = Hyper()
        config = {**_ds_config(route, hyper), "zero_allow_untested_optimizer": True}
        del config["optimizer"]  # a prepared torch AdamW: the config holds none
        ctx.note("deepspeed_config", config)
        return AccelerateSession(ctx, route, subject, hyper, plugin_config=config, schedule=schedule)
    return AccelerateSession(ctx, route, subject, Hyper(), schedule=schedule)


def knob_hyper(route: Route, kernel: str, schedule: str, stride: int = 1) -> Hyper:
    """What one step of a matrix setting does, for the reference: `schedule` names the documented schedule the
    route's library runs where the setting has one (`Hyper.lrs`), `stride` its scheduler steps per optimizer step."""
    knobs = route.knobs
    assert knobs is not None
    # torch's composites name themselves; any other schedule is the library's own, `schedule`
    if knobs.schedule in TORCH_SCHEDULES or knobs.schedule == "constant":
        schedule = knobs.schedule
    return Hyper(
        accumulation=knobs.accumulation,
        clip=Hyper.clip if knobs.clip else 0.0,
        dtype="bfloat16" if knobs.precision == "bf16" else "float32",
        kernel=kernel,
        groups=knobs.groups,
        schedule=schedule,
        stride=stride,
        momentum=MOMENTUM if knobs.optimizer == "sgd" else None,
        adamw=knobs.optimizer != "adam",
        muon=knobs.optimizer == "muon",
        shuffle=knobs.shuffle,
        partial_window=knobs.partial_window,
        frozen=knobs.frozen,
        cycle_momentum=knobs.cycle_momentum,
    )


def _matrix_session(ctx: ProbeContext, route: Route, subject: Subject) -> Session:
    """A setting of the knob matrix on its route: the route's library configured as its documentation says."""
    knobs = route.knobs
    assert knobs is not None
    ctx.note("knobs", knobs.describe(), shown=True)
    if route.wrapper in SESSIONS:
        return SESSIONS[route.wrapper](ctx, route, subject, knob_hyper(route, "torch", "linear"))
    if route.wrapper is Wrapper.DEEPSPEED:
        return _matrix_deepspeed(ctx, route, subject, knobs)
    ctx.require(ACCELERATE, TRANSFORMERS)
    if knobs.partial_window and subject.user is not None:
        ctx.skip("the partial window draws the family's own samples by index; --model's data has no index")
    extra: dict[str, Any] = {"mixed_precision": "bf16"} if knobs.precision == "bf16" else {}
    if route.wrapper is Wrapper.ACCELERATE_DEEPSPEED:
        ctx.require(DEEPSPEED)
        require_deepspeed_ops(ctx)
        # a torch scheduler is not DeepSpeed's (`VALID_LR_SCHEDULES`): Accelerate keeps it, stepped once per process;
        # offloaded, Accelerate swaps a torch Adam(W) for DeepSpeed's CPU Adam of the same kind (1.2.0, PR #3255)
        kernel = "deepspeed" if knobs.offload and knobs.optimizer != "sgd" else "torch"
        hyper = knob_hyper(route, kernel, "linear", stride=ctx.world_size)
        config = {**_ds_config(route, hyper), "zero_allow_untested_optimizer": True}
        del config["optimizer"]
        config.pop("scheduler", None)
        # Accelerate swaps any other offloaded torch optimizer for CPU Adam too, by design (PR #3255's review): a
        # user keeps SGD with zero_force_ds_cpu_optimizer false
        if knobs.offload and knobs.optimizer == "sgd":
            config["zero_force_ds_cpu_optimizer"] = False
        ctx.note("deepspeed_config", config)
        return AccelerateSession(
            ctx, route, subject, hyper, plugin_config=config, extra=extra, schedule=torch_schedule(hyper)
        )
    # a prepared scheduler steps once per process per optimizer step where batches are not split, once where they
    # are (its docs: `AcceleratedScheduler`)
    hyper = knob_hyper(route, "torch", "linear", stride=1 if knobs.split != "none" else ctx.world_size)
    if knobs.shuffle:  # the family's samples by index; the seedable sampler is what Accelerate documents
        if subject.user is not None:
            ctx.skip("the shuffle knob draws the family's own samples by index; --model's data has no index")
        # "rank_seeds" keeps Accelerate's default (a plain RandomSampler whose generator it synchronises), which
        # releases before the seedable sampler (0.26) have too
        if not knobs.rank_seeds:
            from accelerate.utils import DataLoaderConfiguration

            split = {"split_batches": True} if knobs.split == "config" else {}
            extra["dataloader_config"] = DataLoaderConfiguration(use_seedable_sampler=True, **split)
        if knobs.split == "keyword":  # accepted by every release; read up to 0.34.2 (accelerate issue #3177)
            extra["split_batches"] = True
    return AccelerateSession(ctx, route, subject, hyper, extra=extra, schedule=torch_schedule(hyper))


def _matrix_deepspeed(ctx: ProbeContext, route: Route, subject: Subject, knobs: Knobs) -> Session:
    """A matrix setting on a DeepSpeed route: its config (or a client optimizer) as DeepSpeed documents it."""
    ctx.require(DEEPSPEED)
    require_deepspeed_ops(ctx)
    if knobs.optimizer == "muon":
        import deepspeed

        if missing := muon_missing(route.stage, deepspeed.__version__):
            ctx.skip(missing)
    if knobs.optimizer == "muon" and _muon_below_fp32():
        ctx.skip(
            "Muon's Newton-Schulz runs in fp16 on this accelerator (DeepSpeed's `ns_compute_dtype`); the "
            "reference's tolerance is fp32's"
        )
    if knobs.offload_states:
        import deepspeed

        if not hasattr(deepspeed.DeepSpeedEngine, "offload_states"):
            ctx.skip(
                f"DeepSpeed {deepspeed.__version__} has no engine.offload_states (it came in 0.15.2, PR #6011)"
            )
    client = knobs.source == "client"
    sgd = knobs.optimizer == "sgd"
    # the warm-up a client passes is a LambdaLR; DeepSpeed's own schedulers stay in the config over its optimizer
    lambda_lr = client and knobs.schedule in ("warmup", *TORCH_SCHEDULES)
    schedule = "linear" if lambda_lr else DEEPSPEED_SCHEDULERS[knobs.schedule][1]
    hyper = knob_hyper(route, "torch" if client or sgd else "deepspeed", schedule)  # "SGD" is torch's
    if knobs.schedule == "warmup-lr":
        hyper = dataclasses.replace(hyper, peak=_warmup_lr_default_peak())
    config = _ds_config(route, hyper)
    if client:  # a torch AdamW passed in: the config names no optimizer
        del config["optimizer"]
        if lambda_lr:
            config.pop("scheduler", None)
        config["zero_allow_untested_optimizer"] = True
        config["zero_force_ds_cpu_optimizer"] = False
    ctx.note("deepspeed_config", config)
    return DeepSpeedSession(ctx, route, subject, hyper, config, hyper.optimizer_over if client else None)


#: the first DeepSpeed release whose config builds its own Muon at each ZeRO stage (knobs.ZERO_KNOBS)
MUON_SINCE = {1: "0.17.6", 2: "0.17.6", 3: "0.18.9"}


def muon_missing(stage: int, release: str) -> str | None:
    """Why DeepSpeed `release` has no Muon at `stage`, or None: before its first release there, a config's "Muon" is
    not DeepSpeed's (0.16.4 hands its params to torch's own `torch.optim.Muon`, which refuses `betas`)."""
    from packaging.version import Version

    first = MUON_SINCE.get(stage)
    if first is None or Version(release) >= Version(first):
        return None
    return f"DeepSpeed {release} has no Muon at ZeRO-{stage} (its first release there: {first})"


def _muon_below_fp32() -> bool:
    """Whether DeepSpeed's default Newton-Schulz ("gram") runs below fp32 here: in fp16 where the accelerator
    supports it (a GPU; a CPU with AVX512-FP16)."""
    from deepspeed.accelerator import get_accelerator

    return bool(get_accelerator().is_fp16_supported())


def warmup(optimizer: Any) -> Any:
    """A linear warm-up over three steps (a resume that restarts the schedule shows in the lr)."""
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 3))


def follows_schedule(route: Route) -> bool:
    """Whether the route's lr moves (a scheduler): then the reference takes each step's lr from the route."""
    return bool(route.resume) or (route.user is not None and "scheduler" in route.user.config)


def _route_hyper(route: Route, kernel: str) -> Hyper:
    """The family's settings as this DeepSpeed route changes them (its accumulation, bf16)."""
    return Hyper(
        kernel=kernel, accumulation=route.accumulation, dtype="bfloat16" if route.bf16 else Hyper.dtype
    )


def _ds_config(route: Route, hyper: Hyper) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": route.stage}
    if route.offload:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": False}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": hyper.micro_batch,
        "gradient_accumulation_steps": hyper.accumulation,
        "gradient_clipping": hyper.clip,
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "optimizer": _ds_optimizer(hyper),
    }
    if route.bf16:
        config["bf16"] = {"enabled": True}
    # (torch's composites are a client's scheduler: the config names none)
    if route.knobs is not None and route.knobs.schedule not in ("constant", *TORCH_SCHEDULES):
        config["scheduler"] = _knob_scheduler(route.knobs.schedule, hyper)
    if hyper.muon and route.stage == 3:  # ZeRO-3 refuses Muon with reduce_scatter
        zero["reduce_scatter"] = False
    if hyper.momentum is not None:  # torch's SGD is not one ZeRO knows
        config["zero_allow_untested_optimizer"] = True
        config["zero_force_ds_cpu_optimizer"] = False
    if route.knobs is not None and route.knobs.accumulate_fp32:
        config["data_types"] = {"grad_accum_dtype": "fp32"}
    if route.resume:
        config["scheduler"] = _warmup_decay(hyper.lr, 3, 12)
    return config


def _ds_optimizer(hyper: Hyper) -> dict[str, Any]:
    """DeepSpeed's config block of `hyper`'s optimizer: torch's SGD by name (DeepSpeed builds any torch.optim type it
    is given); Muon, both halves taking the config's lr, betas, eps and weight decay; Adam's L2 ("Adam" alone means
    AdamW to DeepSpeed: its adam_w_mode defaults to true); else AdamW."""
    if hyper.momentum is not None:
        return {
            "type": "SGD",
            "params": {"lr": hyper.lr, "momentum": hyper.momentum, "weight_decay": hyper.weight_decay},
        }
    params = {
        "lr": hyper.lr,
        "betas": list(hyper.betas),
        "eps": hyper.eps,
        "weight_decay": hyper.weight_decay,
    }
    if hyper.muon:
        return {"type": "Muon", "params": params}
    if not hyper.adamw:
        return {"type": "Adam", "params": {**params, "adam_w_mode": False}}
    return {"type": "AdamW", "params": params}


def _knob_scheduler(schedule: str, hyper: Hyper) -> dict[str, Any]:
    """DeepSpeed's config block of a matrix `schedule`, over `hyper`'s groups."""
    from ds_doctor.probes.equivalence import knobs as k

    rates = [g["lr"] for g in k.group_settings(hyper.groups, hyper.lr, hyper.weight_decay)]
    kind = DEEPSPEED_SCHEDULERS[schedule][0]
    if kind == "WarmupDecayLR":  # each group its own max rate (a list)
        return _warmup_decay(rates if len(rates) > 1 else rates[0], k.WARMUP, k.TOTAL)
    # OneCycle: every group from a tenth of the rate to the rate, in stairs, Adam's betas left alone (a float:
    # releases before 0.19.6 take no list, and set every group's lr to one they are given)
    if kind == "OneCycle":
        cycle = {"cycle_min_lr": hyper.lr * k.ONECYCLE_MIN, "cycle_max_lr": hyper.lr}
        cycle |= {"cycle_first_step_size": k.ONECYCLE_STEPS, "cycle_first_stair_count": k.ONECYCLE_STAIRS}
        # the "cycle_momentum" knob: its momentum at its defaults (cycled, 0.8 to 0.9), written into Adam's betas
        if hyper.cycle_momentum:
            return {"type": kind, "params": cycle}
        return {"type": kind, "params": {**cycle, "cycle_momentum": False}}
    # WarmupLR's max rate left to its default; WarmupCosineLR's are the groups' own by design
    params: dict[str, Any] = {"warmup_num_steps": k.WARMUP, "warmup_type": "linear"}
    if kind == "WarmupLR":
        params["warmup_min_lr"] = 0.0
    else:
        params |= {"total_num_steps": k.TOTAL, "warmup_min_ratio": 0.0, "cos_min_ratio": k.COS_MIN}
    return {"type": kind, "params": params}


#: a matrix `schedule` on a DeepSpeed route: the config's scheduler type, and the reference's name of it (`Hyper`)
DEEPSPEED_SCHEDULERS = {
    "warmup": ("WarmupDecayLR", "deepspeed"),
    "warmup-lr": ("WarmupLR", "deepspeed-warmup"),
    "cosine": ("WarmupCosineLR", "deepspeed-cosine"),
    "onecycle": ("OneCycle", "deepspeed-onecycle"),
    "constant": ("", "constant"),
}


def _warmup_lr_default_peak() -> float | None:
    """`WarmupLR`'s max rate where a config names none, read from the release that runs: each group's own rate
    (None) since 0.17.2 (PR #7360), 0.001 for every group before."""
    import inspect

    from deepspeed.runtime.lr_schedules import WarmupLR

    default = inspect.signature(WarmupLR.__init__).parameters["warmup_max_lr"].default
    return None if default is None else float(default)


def _warmup_decay(max_lr: float | list[float], warmup: int, total: int) -> dict[str, Any]:
    """DeepSpeed's config block of a linear `WarmupDecayLR` from 0."""
    return {
        "type": "WarmupDecayLR",
        "params": {
            "warmup_min_lr": 0.0,
            "warmup_max_lr": max_lr,
            "warmup_num_steps": warmup,
            "total_num_steps": total,
            "warmup_type": "linear",
        },
    }


def deepspeed_config(ctx: ProbeContext, route: Route) -> tuple[dict[str, Any], Any]:
    """The config and, where it names no optimizer, the client optimizer the HF Trainer would pass."""
    # a torch AdamW passed in: a resumed process loads no JIT-built op; bf16 without ZeRO wraps a client optimizer
    if route.user is None and (route.resume or route.bf16):
        hyper = _route_hyper(route, "torch")
        config = {k: v for k, v in _ds_config(route, hyper).items() if k != "optimizer"}
        return config, hyper.optimizer_over
    if route.user is None:
        return _ds_config(route, _route_hyper(route, "deepspeed")), None
    user: UserConfig = route.user
    filled = fill(user.config, ctx.world_size, ctx.device)
    trainer_optimizer(filled)
    ctx.note(
        DeepSpeedConfigNote.NOTE,
        {
            "path": user.path,
            "sha256": user.sha256,
            "filled": filled.filled,
            "changed": filled.changed,
            "left_to_deepspeed": filled.unfilled,
        },
    )
    ctx.add_findings(change_findings(filled, ctx.rank))
    config = {**filled.config, "steps_per_print": 10**9, "wall_clock_breakdown": False}
    client = None if "optimizer" in config else (lambda params: route_optimizer(config, params))
    return config, client


def hyper_from_config(ctx: ProbeContext, config: dict[str, Any]) -> Hyper:
    """What one step of this DeepSpeed config does, for the reference to do the same; a config whose optimizer the
    reference cannot reproduce is skipped, with the reason."""
    block = config.get("optimizer")
    if block is None:
        kind, params, adamw = "AdamW", dict(TRAINER_OPTIMIZER[1]), True
    else:
        kind, params = str(block.get("type", "")), dict(block.get("params") or {})
        adamw = kind.lower() == "adamw" or (kind.lower() == "adam" and bool(params.get("adam_w_mode", True)))
        if kind.lower() not in ("adam", "adamw"):
            ctx.skip(f"the reference reproduces Adam and AdamW; the config's optimizer is {kind!r}")
    betas: Any = params.get("betas", (0.9, 0.999))
    dtype = (
        "bfloat16"
        if (config.get("bf16") or {}).get("enabled")
        else "float16"
        if (config.get("fp16") or {}).get("enabled")
        else "float32"
    )
    return Hyper(
        micro_batch=int(config.get("train_micro_batch_size_per_gpu", 1)),
        accumulation=int(config.get("gradient_accumulation_steps", 1)),
        clip=float(config.get("gradient_clipping", _deepspeed_default_clipping()) or 0.0),
        lr=float(params.get("lr", 1e-3)),
        betas=(float(betas[0]), float(betas[1])),
        eps=float(params.get("eps", 1e-8)),
        weight_decay=float(params.get("weight_decay", 0.0)),
        adamw=adamw,
        dtype=dtype,
        kernel="torch" if block is None or params.get("torch_adam") else "deepspeed",
    )


def _deepspeed_default_clipping() -> float:
    """What DeepSpeed clips to where a config names no `gradient_clipping`: its own default, read from the release
    that runs (1.0 since 0.19.3, PR #8068; 0.0, no clipping, before)."""
    from deepspeed.runtime import constants

    return float(getattr(constants, "GRADIENT_CLIPPING_DEFAULT", 0.0))


def _user_accelerate(ctx: ProbeContext, route: Route, subject: Subject) -> Session:
    """The Accelerator the user's YAML builds; the reference follows its accumulation, clipping and precision."""
    setup = ctx.options.user_accelerate_config()
    assert setup is not None
    ctx.note(AccelerateConfigNote.NOTE, setup.summary())
    if reason := accelerate_config.skip_reason(setup, ctx.device_kind):
        ctx.skip(reason)
    section = dict(setup.data.get("deepspeed_config") or {})
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(setup.mixed_precision, "float32")
    hyper = Hyper(
        accumulation=int(section.get("gradient_accumulation_steps", Hyper.accumulation)),
        clip=float(section.get("gradient_clipping", Hyper.clip)),
        dtype=dtype,
    )
    extra = accelerate_config.accelerator_kwargs(setup)
    if setup.distributed_type == "DEEPSPEED":
        ctx.require(DEEPSPEED)
        plugin = extra.pop("deepspeed_plugin")
        # a prepared torch AdamW
        config = {k: v for k, v in plugin.deepspeed_config.items() if k != "optimizer"}
        config["train_micro_batch_size_per_gpu"] = hyper.micro_batch
        return AccelerateSession(ctx, route, subject, hyper, plugin_config=config, extra=extra)
    return AccelerateSession(ctx, route, subject, hyper, extra=extra)

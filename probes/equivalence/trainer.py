"""The HF Trainer route of the equivalence family: a tiny causal LM (Llama, or the user's `--model hf:...`) on
right-padded sequences whose micro-batches hold different numbers of label tokens, so that a loss normalised per
micro-batch and one normalised per token over the accumulated global batch differ (transformers#34191: the Trainer
fix of 4.46 for models that take `**kwargs`).

The reference is the token mean over the global batch of each optimizer step: every micro-batch's summed
cross-entropy (labels shifted, -100 ignored) divided by the step's label-token count over all ranks, computed from
the model's logits in plain torch. The Trainer runs with its own dataloader (sequential sampler, Accelerate's
per-rank batches), `max_grad_norm`, `adamw_torch` (weight decay only in the knob matrix's settings, whose reference
builds the Trainer's no-decay groups by name itself), logging every step; callbacks read each step's loss, gradient
norm, lr and parameters, and each module's output on micro-batch 0. The stream and the token-mean reference are
`tokens`. A resume case saves through the Trainer's own checkpoint and resumes in a new process with
`train(resume_from_checkpoint=...)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ds_doctor.plugins import ModelNote, ProbeContext
from ds_doctor.plugins.requirements import ACCELERATE, DEEPSPEED, TRANSFORMERS
from ds_doctor.probes.equivalence.cases import (
    DOUBLE_DIVISION_ISSUE,
    HEAD_DROPS_ISSUE,
    LABEL_SMOOTHING_ISSUE,
    NOT_DIVIDED_ISSUE,
    OVERCOUNT_ISSUE,
    Route,
)
from ds_doctor.probes.equivalence.knobs import DATA_SEED, MOMENTUM, WARMUP, epoch_micro_batches, resume_at
from ds_doctor.probes.equivalence.reference import independent as independent_reference
from ds_doctor.probes.equivalence.subject import Hyper, StepRecord, Subject, digest
from ds_doctor.probes.equivalence.tokens import SEQUENCE, build_model, predicted_over_counted, sample
from ds_doctor.probes.shared.common import accelerate_session

TRAINER_HYPER = Hyper(lr=1e-3, weight_decay=0.0)
# how close the loss ratio must come to (tokens predicted)/(labels counted) to be that scale
OVERCOUNT_MATCH = 1e-4
# how close the first step's gradient norm must come to the reference's / accumulation steps to be that scale
DOUBLE_DIVISION_MATCH = 1e-3
# how close a smoothed loss must come to the reference's times the accumulation steps (and the ranks) to be the
# LabelSmoother's undivided sum: that sum is of each micro-batch's own mean where the reference takes the window's token
# mean, equal only where every micro-batch's mean is the same. At the first step of a fresh model the token losses are
# all near ln(vocabulary), so the two differ by little: 1.6e-4 measured at two ranks (transformers 5.12.0, 3.9994
# where 4 is the scale), where the overcount's exact test (1e-4) missed it. The scales this test tells apart differ
# by a factor of 2 at least.
SMOOTHED_SUM_MATCH = 1e-2
REMEDY_GA = (
    "Let the model take **kwargs in forward (so the Trainer passes num_items_in_batch and the loss is "
    "normalised per token over the accumulated batch), or pass compute_loss_func; upgrade transformers to "
    ">= 4.46 for its own models."
)

if TYPE_CHECKING:
    from ds_doctor.plugins import RankOptions


def model_type(options: RankOptions, route: Route | None = None) -> str | None:
    """The HF model type to train: the route's own (`hf:X`), else the user's `--model hf:X`, else Llama; None for a
    factory (`--model pkg:fn`), whose batches carry no labels for the Trainer."""
    from ds_doctor.plugins.usersetup import user_model

    spec = (
        user_model.ModelSpec.parse(route.model) if route is not None and route.model else options.model_spec()
    )
    if spec is None:  # the matrix's: Qwen2, whose attention has biases and whose norms are RMSNorms by name
        return "qwen2" if route is not None and route.knobs is not None else "llama"
    return spec.target if spec.kind == "hf" else None


class NoLossKwargs:
    """A user module around the LM whose forward names its arguments and takes no **kwargs (built lazily: torch is
    imported inside the case)."""

    @staticmethod
    def wrap(inner: Any) -> Any:
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, input_ids: Any, attention_mask: Any = None, labels: Any = None) -> Any:
                return self.inner(input_ids=input_ids, attention_mask=attention_mask, labels=labels)

        return Wrapper()


@dataclasses.dataclass
class Recorder:
    """What the callbacks saw: per step the summed micro-batch losses, the lr before the step, the grad norm logged,
    the parameters after it; and a fingerprint at the save (straight run) or the first resumed step."""

    records: list[StepRecord] = dataclasses.field(default_factory=list)
    micro_losses: list[Any] = dataclasses.field(default_factory=list)
    lr: float = 0.0
    fingerprint: dict[str, Any] | None = None
    fingerprint_at_first_step: bool = False
    # per step, each module's output on micro-batch 0, and their gradients (where.py)
    outputs: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)
    grads: dict[int, dict[str, Any]] = dataclasses.field(default_factory=dict)


def make_trainer(
    ctx: ProbeContext,
    route: Route,
    hyper: Hyper,
    out: Path,
    recorder: Recorder,
    *,
    max_steps: int,
    save_steps: int | None,
    schedule: bool,
) -> Any:
    """A Trainer over the stream, with the recording callbacks."""
    import torch
    import transformers

    from ds_doctor.probes.equivalence.where import recording

    kind = model_type(ctx.options, route)
    assert kind is not None
    # frozen before the Trainer sees it, as in the reference
    model = hyper.freeze(build_model(kind, hyper.head))
    vocab = model.config.vocab_size
    if not route.loss_kwargs:
        model = NoLossKwargs.wrap(model)
    short = hyper.accumulation - 1 if route.partial_window else 0  # the last window: one micro-batch per rank
    count = (max_steps * hyper.accumulation - short) * hyper.micro_batch * ctx.world_size
    # the matrix's shuffle and partial window: an epoch of EPOCH_STEPS steps (the last window one micro-batch per
    # rank under the latter), the Trainer's own sampler over it
    if hyper.shuffle or hyper.partial_window:
        count = (
            epoch_micro_batches(hyper.accumulation, hyper.partial_window) * hyper.micro_batch * ctx.world_size
        )

    class Stream(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return count

        def __getitem__(self, index: int) -> dict[str, Any]:
            return sample(index, vocab, route.first_label_masked, hyper.head)

    class Recording(transformers.Trainer):
        def training_step(self, model: Any, *args: Any, **kwargs: Any) -> Any:
            step = len(recorder.records)
            if recorder.micro_losses or step in recorder.outputs:  # micro-batch 0 of each step is recorded
                loss = super().training_step(model, *args, **kwargs)
            else:
                grads: dict[str, Any] = {}
                with recording(model, grads) as outputs:
                    loss = super().training_step(model, *args, **kwargs)
                recorder.outputs[step] = {n.removeprefix("inner."): v for n, v in outputs.items()}
                recorder.grads[step] = {n.removeprefix("inner."): v for n, v in grads.items()}
            recorder.micro_losses.append(loss.detach().float().reshape(()))
            return loss

        def _get_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
            if hyper.shuffle:
                return super()._get_train_sampler(*args, **kwargs)
            return torch.utils.data.SequentialSampler(self.train_dataset)

    # the token mean over every rank's tokens, as the reference computes it (`per_device_tokens`)
    offered = hasattr(transformers.TrainingArguments, "average_tokens_across_devices")
    global_count = offered and not per_device_tokens()
    averaging = {"average_tokens_across_devices": True} if global_count else {}
    args = _training_arguments(
        transformers,
        **averaging,
        output_dir=str(out),
        per_device_train_batch_size=hyper.micro_batch,
        gradient_accumulation_steps=hyper.accumulation,
        max_steps=max_steps,
        learning_rate=hyper.lr,
        weight_decay=hyper.weight_decay,
        max_grad_norm=hyper.clip,
        label_smoothing_factor=route.label_smoothing,
        optim="sgd" if hyper.momentum is not None else "adamw_torch",
        optim_args=f"momentum={hyper.momentum}" if hyper.momentum is not None else None,
        lr_scheduler_type="linear" if schedule else "constant",
        warmup_steps=WARMUP if schedule else 0,
        bf16=hyper.dtype == "bfloat16",
        logging_steps=1,
        save_strategy="steps" if save_steps else "no",
        save_steps=save_steps or 500,
        report_to="none",
        disable_tqdm=True,
        seed=0,
        data_seed=DATA_SEED if hyper.shuffle else None,
        dataloader_num_workers=0,
        use_cpu=ctx.device_kind == "cpu",
        ddp_backend=ctx.backend if ctx.world_size > 1 else None,
        deepspeed=deepspeed_config(route) if route.stage else None,
    )
    return Recording(model=model, args=args, train_dataset=Stream(), callbacks=[_callback(ctx, recorder)])


def _training_arguments(transformers: Any, **kwargs: Any) -> Any:
    """TrainingArguments of this release: `use_cpu` is `no_cuda` before 4.35 (read in 4.26.1 and 4.35.0), and an
    argument the release lacks (`ddp_backend`, `optim_args` before 4.27-4.28) is left out where it is None, so the
    matrix's Trainer settings run on the releases a fix's range reaches back to; one set to a value still raises."""
    import inspect

    params = inspect.signature(transformers.TrainingArguments.__init__).parameters
    if "use_cpu" not in params:
        kwargs["no_cuda"] = kwargs.pop("use_cpu")
    return transformers.TrainingArguments(
        **{name: value for name, value in kwargs.items() if name in params or value is not None}
    )


def per_device_tokens() -> bool:
    """Whether the route's Trainer divides each rank's loss by that rank's own label tokens (the ranks then averaged)
    rather than by every rank's, so the reference does too. transformers 4.46.0 and 4.46.1 count num_items_in_batch
    per rank and offer nothing else; 4.46.2-4.53 default to it (`average_tokens_across_devices` False, a documented
    choice, met wherever the ranks hold unequal tokens, as under a shuffled order), and before 4.48.0 turning the
    option on gathers a None count at an epoch's end (accelerate's `_gpu_gather_one` raises TypeError: measured on
    4.46.3, read in 4.47.0; 4.48.0 checks for None), so there the route keeps the default. From 4.48.0 the route
    asks for the global count by name (the default from 4.54). Before 4.46 the Trainer counted no tokens at all (a
    mean per micro-batch: `hf_trainer_ga_loss_per_microbatch`), which the reference does not follow."""
    import inspect

    import transformers
    from packaging.version import Version

    counts = "num_items_in_batch" in inspect.signature(transformers.Trainer.compute_loss).parameters
    return counts and Version(transformers.__version__).release < (4, 48)


def _stop(at: int) -> Any:
    """A callback that stops training after optimizer step `at` (its checkpoint is written first): a job cut off,
    before its resume."""
    import transformers

    class Stop(transformers.TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step >= at:
                control.should_training_stop = True

    return Stop()


def deepspeed_config(route: Route) -> dict[str, Any]:
    """The Trainer's DeepSpeed config as its docs write one: ZeRO at the route's stage and "auto" for what the
    TrainingArguments say (micro-batch, accumulation, clipping, bf16); no optimizer or scheduler, so the Trainer
    passes its own (adamw_torch and its schedule) to the engine."""
    auto = "auto"
    return {
        "zero_optimization": {"stage": route.stage},
        "train_micro_batch_size_per_gpu": auto,
        "train_batch_size": auto,
        "gradient_accumulation_steps": auto,
        "gradient_clipping": auto,
        "bf16": {"enabled": auto},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }


def _params(model: Any) -> dict[str, Any]:
    """The model's parameters as fp32 CPU copies, named as the reference names them."""
    import torch

    return {
        n.removeprefix("inner."): p.detach().to("cpu", torch.float32, copy=True)
        for n, p in model.named_parameters()
    }


def _fingerprint(model: Any, optimizer: Any, scheduler: Any) -> dict[str, Any]:
    """What a resumed run must restore: parameters, optimizer state, lr, scheduler step and RNG."""
    from ds_doctor.probes.equivalence.resume import optimizer_state, rng_state

    return {
        "parameters": {n: digest(v) for n, v in _params(model).items()},
        "optimizer state": optimizer_state(optimizer),
        "lr": {f"group{i}": float(g["lr"]) for i, g in enumerate(optimizer.param_groups)},
        "scheduler step": {"scheduler": int(scheduler.last_epoch)},
        "rng": rng_state(),
    }


def _callback(ctx: ProbeContext, recorder: Recorder) -> Any:
    import torch
    import torch.distributed as dist
    import transformers

    params, fingerprint = _params, _fingerprint

    class Record(transformers.TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            # transformers 4.49-4.52 hand the callbacks no optimizer here: its scheduler holds it
            optimizer = kw.get("optimizer") or getattr(kw.get("lr_scheduler"), "optimizer", None)
            recorder.lr = float(optimizer.param_groups[0]["lr"]) if optimizer is not None else float("nan")
            if recorder.fingerprint_at_first_step and recorder.fingerprint is None:
                recorder.fingerprint = fingerprint(kw["model"], optimizer, kw["lr_scheduler"])

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            window = torch.stack(recorder.micro_losses).sum().to(ctx.device)
            recorder.micro_losses.clear()
            if dist.is_initialized():
                dist.all_reduce(window)
            # as the Trainer logs it: the ranks' mean of the window's sum
            loss = float(window) / ctx.world_size
            recorder.records.append(StepRecord(loss, None, recorder.lr, params(kw["model"])))

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "grad_norm" in logs and recorder.records and recorder.records[-1].grad_norm is None:
                recorder.records[-1].grad_norm = float(logs["grad_norm"])

        def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if recorder.fingerprint is None and not recorder.fingerprint_at_first_step:
                recorder.fingerprint = fingerprint(kw["model"], kw["optimizer"], kw["lr_scheduler"])

    return Record()


def run(ctx: ProbeContext, route: Route) -> None:
    """Train through the Trainer; judge its steps against the token-mean reference (and, for a resume case, resume
    in a new process and compare)."""
    from ds_doctor.probes.equivalence.invariants import Judging, judge
    from ds_doctor.probes.equivalence.shrink import smallest

    ctx.require(TRANSFORMERS, ACCELERATE)
    if route.stage:
        ctx.require(DEEPSPEED)
    kind = model_type(ctx.options, route)
    if kind is None:
        ctx.skip(
            "the Trainer route trains a causal LM on padded token batches with labels: --model hf:<type> runs "
            "through it, a factory (package.module:fn) does not"
        )
    hyper = matrix_hyper(route) if route.knobs is not None else TRAINER_HYPER
    head = " with a sequence-classification head" if hyper.head == "classify" else ""
    ctx.note(ModelNote.NOTE, f"hf:{kind} (tiny){head}, right-padded sequences of 2-{SEQUENCE} tokens")
    if route.knobs is not None:
        ctx.note("knobs", route.knobs.describe(), shown=True)
    out = ctx.scratch_dir() / "checkpoint"
    recorder = Recorder()
    trainer = _train(ctx, route, hyper, out, recorder)
    subject = Subject(build=lambda _ws: None, spec=f"hf:{kind}")
    records = recorder.records
    ctx.note(
        "trainer",
        {
            "transformers": _version(),
            "model_accepts_loss_kwargs": getattr(trainer, "model_accepts_loss_kwargs", None),
        },
    )
    ratio = predicted_over_counted(hyper, ctx.world_size, route.first_label_masked)
    ctx.note("label_tokens_first_step", {"predicted": ratio[0], "counted_unshifted": ratio[1]})

    explain = _explainer(ctx, route, hyper, records, ratio)

    # a matrix setting's rates from the documented schedule; the resume route's copied from the Trainer's
    lrs = _documented_lrs(hyper) if route.knobs else [r.lr for r in records]
    judging = Judging(
        schedule=True,
        remedy=REMEDY_GA if not route.loss_kwargs else None,
        reference_run=_reference(ctx, route, hyper, kind, lrs),
        explain=explain,
        smallest=(lambda: smallest(ctx, route, diverges)) if route.knobs is not None else None,
        outputs=recorder.outputs,
        grads=recorder.grads,
        outputs_request=lambda step: {
            "call": "ds_doctor.probes.equivalence.tokens:token_outputs",
            "args": (
                kind,
                hyper,
                ctx.world_size,
                lrs,
                (1 if route.partial_window else None, route.label_smoothing, per_device_tokens()),
                step,
                0,
            ),
        },
    )
    judge(ctx, route, subject, hyper, records, judging)
    if route.resume:
        from ds_doctor.probes.equivalence.resume import compare, spawn

        k = _resume_at(hyper)
        loaded, resumed = spawn(ctx, k, out)
        from ds_doctor.plugins.checks import Tolerance

        compare(ctx, route, recorder.fingerprint or {}, loaded, records, resumed, k, Tolerance(hyper.dtype))


def _explainer(
    ctx: ProbeContext, route: Route, hyper: Hyper, records: list[StepRecord], ratio: tuple[int, int]
) -> Callable[[list[StepRecord]], str | None]:
    """The known issue a Trainer route's divergence is, where the route tells them apart (`judge`'s explain)."""
    from ds_doctor.probes.equivalence.invariants import UNEXPLAINED, tolerance_for

    def explain(ref: list[StepRecord]) -> str | None:
        """The overcount where the first step's loss is the reference's scaled by predicted/counted tokens (as
        near as the dtype's tolerance); the LabelSmoother's missing division where a smoothed loss is the
        reference's times the accumulation steps (and the ranks); the double division where the loss is right and
        the first gradient norm is the reference's / accumulation steps; the undivided loss of 4.47.0 and 4.48.0
        where an unsmoothed loss is the reference's times the accumulation steps;
        on either's own route, anything else is not it (transformers 4.46.0-4.46.1 dropped the division by the
        accumulation steps for models without loss kwargs, GPT-2 among them: no entry of the catalog)."""
        if hyper.head == "classify":  # a classifier's own scales (`_head_explained`), none of the LM's
            return _head_explained(ctx, route, hyper, records, ref)
        scale = records[0].loss / ref[0].loss if records and ref and ref[0].loss else None
        # as close as the route's dtype lets a loss come (a bf16 loss is off by its rounding too)
        near = max(OVERCOUNT_MATCH, tolerance_for(ctx, route, hyper).at(0))
        if scale is not None and abs(scale - ratio[0] / ratio[1]) <= near and ratio[0] != ratio[1]:
            return OVERCOUNT_ISSUE
        # the LabelSmoother's own mean per micro-batch, summed: the loss times the accumulation steps (and the
        # ranks, where average_tokens_across_devices multiplies by them)
        times = {hyper.accumulation, hyper.accumulation * ctx.world_size} - {1}
        smoothed_near = max(near, SMOOTHED_SUM_MATCH)
        if (
            route.label_smoothing
            and scale is not None
            and any(abs(scale / t - 1) <= smoothed_near for t in times)
        ):
            return LABEL_SMOOTHING_ISSUE
        # the window's micro-batch means summed without smoothing: 4.47.0's and 4.48.0's undivided loss (the
        # accumulation steps alone: a loss off by the world size is another bug, transformers#35078)
        undivided = (
            hyper.accumulation > 1 and scale is not None and abs(scale / hyper.accumulation - 1) <= near
        )
        if not route.label_smoothing and undivided:
            return NOT_DIVIDED_ISSUE
        norm = _norm_scale(records, ref)
        # with one micro-batch a window there is no second division to tell apart
        if (
            scale is not None
            and abs(scale - 1) <= OVERCOUNT_MATCH
            and norm is not None
            and hyper.accumulation > 1
        ):
            if abs(norm * hyper.accumulation - 1) <= DOUBLE_DIVISION_MATCH:
                return DOUBLE_DIVISION_ISSUE
        return UNEXPLAINED if route.issue in (OVERCOUNT_ISSUE, DOUBLE_DIVISION_ISSUE) else None

    return explain


#: how close the classifier's first loss must come to the reference's times a scale (the accumulation steps, the
#: ranks, or both) to be that scale: the scales it tells apart differ by a factor of 2 at least
HEAD_SCALE_MATCH = 1e-3


def _head_explained(
    ctx: ProbeContext, route: Route, hyper: Hyper, records: list[StepRecord], ref: list[StepRecord]
) -> str | None:
    """A classifier whose first loss is the documented one times the accumulation steps, the ranks or both: the
    Trainer took its **kwargs for a model that divides by num_items_in_batch (transformers #47688); anything else is
    not it."""
    from ds_doctor.probes.equivalence.invariants import tolerance_for

    if not records or not ref or not ref[0].loss:
        return None
    scale = records[0].loss / ref[0].loss
    near = max(HEAD_SCALE_MATCH, tolerance_for(ctx, route, hyper).at(0))
    scales = {hyper.accumulation, ctx.world_size, hyper.accumulation * ctx.world_size} - {1}
    return HEAD_DROPS_ISSUE if any(abs(scale / t - 1) <= near for t in scales) else None


def _train(ctx: ProbeContext, route: Route, hyper: Hyper, out: Path, recorder: Recorder) -> Any:
    """The Trainer built for `route` and trained (its recorder holds the steps). A matrix setting with "resume":
    trained to its checkpoint at optimizer step `knobs.resume_at` (inside the first epoch; with "shuffle", inside
    the second) and stopped there, then a fresh Trainer (a fresh model)
    resumed from it with `train(resume_from_checkpoint=...)` to the end, as a job that was cut off and restarted."""
    schedule = bool(route.resume) or hyper.schedule != "constant"

    def build(save_steps: int | None) -> Any:
        return make_trainer(
            ctx, route, hyper, out, recorder, max_steps=hyper.steps, save_steps=save_steps, schedule=schedule
        )

    with accelerate_session():
        ctx.enter("trainer.train")
        if route.knobs is not None and route.knobs.resume:
            at = resume_at(route.knobs)
            first = build(at)
            first.add_callback(_stop(at))
            first.train()
            ctx.enter(f"trainer.train(resume_from_checkpoint=checkpoint-{at})")
            resumed = build(None)
            resumed.train(resume_from_checkpoint=str(out / f"checkpoint-{at}"))
            return resumed
        trainer = build(_resume_at(hyper) if route.resume else None)
        trainer.train()
    return trainer


def _reference(
    ctx: ProbeContext, route: Route, hyper: Hyper, kind: str, lrs: list[float]
) -> list[StepRecord]:
    """The token-mean reference of `route`'s steps, computed in the reference's own process."""
    return independent_reference(
        {
            "call": "ds_doctor.probes.equivalence.tokens:token_reference",
            "args": (
                kind,
                hyper,
                ctx.world_size,
                lrs,
                1 if route.partial_window else None,
                route.label_smoothing,
                per_device_tokens(),
            ),
        },
        ctx.rank,
        ctx.world_size,
        ctx.device,
    )


def diverges(ctx: ProbeContext, route: Route) -> bool:
    """A shrink's rerun of a matrix setting (`shrink.smallest`): the Trainer at `route`'s setting, against its
    token-mean reference; whether it leaves the tolerance anywhere, on this rank."""
    from ds_doctor.probes.equivalence import invariants

    kind = model_type(ctx.options, route)
    assert kind is not None
    hyper = matrix_hyper(route)
    recorder = Recorder()
    _train(ctx, route, hyper, ctx.scratch_dir() / "shrink", recorder)
    ref = _reference(ctx, route, hyper, kind, _documented_lrs(hyper))
    return invariants.diverges(ctx, route, hyper, recorder.records, ref)


def _documented_lrs(hyper: Hyper) -> list[float]:
    """A matrix setting's lr at each step, from the documented schedule (the Trainer's groups share one rate)."""
    return [hyper.lrs(s)[0] for s in range(hyper.steps)]


def matrix_hyper(route: Route) -> Hyper:
    """A matrix setting on the Trainer: the route's settings with the knobs' accumulation, clipping, precision,
    weight decay ("decay": the Trainer's groups, by name) and linear warm-up over its max_steps."""
    knobs = route.knobs
    assert knobs is not None
    return dataclasses.replace(
        TRAINER_HYPER,
        accumulation=knobs.accumulation,
        clip=TRAINER_HYPER.clip if knobs.clip else 0.0,
        dtype="bfloat16" if knobs.precision == "bf16" else "float32",
        groups=knobs.groups,
        weight_decay=0.1 if knobs.groups == "decay" else 0.0,  # the Trainer's common setting: its decay shows
        schedule="constant" if knobs.schedule == "constant" else "linear",
        total=TRAINER_HYPER.steps,
        momentum=MOMENTUM if knobs.optimizer == "sgd" else None,
        shuffle=knobs.shuffle,
        partial_window=knobs.partial_window,
        frozen=knobs.frozen,
        head=knobs.head,
    )


def _norm_scale(records: list[StepRecord], ref: list[StepRecord]) -> float | None:
    """The route's first gradient norm over the reference's (None where either did not say)."""
    route, plain = records[0].grad_norm if records else None, ref[0].grad_norm if ref else None
    return route / plain if route is not None and plain else None


def _resume_at(hyper: Hyper) -> int:
    from ds_doctor.probes.equivalence.resume import resume_step

    return resume_step(hyper.steps)


def resume_child(ctx: ProbeContext, route: Route, k: int, directory: Path) -> dict[str, Any]:
    """In the new process: a fresh Trainer, `train(resume_from_checkpoint=<checkpoint-k>)`, what it held at its first
    step, and the steps after."""
    recorder = Recorder(fingerprint_at_first_step=True)
    hyper = TRAINER_HYPER
    with accelerate_session():
        trainer = make_trainer(
            ctx, route, hyper, directory, recorder, max_steps=hyper.steps, save_steps=None, schedule=True
        )
        trainer.train(resume_from_checkpoint=str(directory / f"checkpoint-{k}"))
    return {"fingerprint": recorder.fingerprint or {}, "records": [r.to_dict() for r in recorder.records]}


def _version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None

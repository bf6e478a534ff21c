"""What an equivalence case trains and the plain-torch reference it is held to.

One model (the probes' tiny MLP, or the user's `--model`), one deterministic data stream (micro-batch (step, micro,
rank) always holds the same samples) and one seed. The reference runs in the rank's own process, single-process,
fp32: for each optimizer step it computes every simulated rank's accumulation window in turn, exactly as the route
splits the global batch (loss / accumulation, backward, gradients summed over the micro-batches), averages the ranks'
gradients, clips to the global norm and takes a torch AdamW step. With micro-batches of equal size that is the math
of the full global batch.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ds_doctor.plugins.checks import Gap
from ds_doctor.probes.equivalence.bounds import allowances, kernel_epsilon, noise_allowances
from ds_doctor.probes.equivalence.knobs import TOTAL, documented_order, epoch_window, sequential_order
from ds_doctor.probes.shared.models import batch, build_mlp

if TYPE_CHECKING:
    from ds_doctor.plugins import RankOptions


@dataclasses.dataclass(frozen=True)
class Hyper:
    """What one optimizer step does, as the route is configured: the reference reproduces exactly this."""

    steps: int = 4
    micro_batch: int = 4
    accumulation: int = 2
    clip: float = 0.05  # far below this model's gradient norms (0.6-0.9): clipping engages at every step
    lr: float = 1e-2
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    adamw: bool = True  # decoupled weight decay (AdamW); False: Adam's L2
    dtype: str = "float32"  # the route's compute dtype (the reference is fp32 always)
    kernel: str = "torch"  # whose Adam the route steps with: "torch", or "deepspeed" (fp32 bias corrections)
    groups: str = "one"  # the parameter groups (`knobs.split`): "one", "decay", "rates"
    # the lr schedule, as documented: "constant", "linear" (transformers' linear warm-up and decay, a LambdaLR
    # stepped per optimizer step), DeepSpeed's config schedulers stepped by the engine: "deepspeed" (WarmupDecayLR),
    # "deepspeed-warmup" (WarmupLR), "deepspeed-cosine" (WarmupCosineLR), "deepspeed-onecycle" (OneCycle, stairs);
    # torch's composites `knobs.TORCH_SCHEDULES`: "sequential", "nested" (one documented factor, `sequential_factor`)
    schedule: str = "constant"
    stride: int = 1  # scheduler steps per optimizer step (Accelerate's prepared scheduler: one per process)
    total: int = TOTAL  # the linear schedule's last step (the Trainer's: its max_steps)
    # WarmupLR's max rate where one rate holds for every group, else each group's own
    peak: float | None = None
    # torch's SGD with this momentum (L2 weight decay) instead of Adam(W)
    momentum: float | None = None
    # Muon on the matrices and AdamW on the rest (`ds_doctor.probes.equivalence.muon`), one group
    muon: bool = False
    # the samples of each micro-batch in the order Accelerate documents for a shuffled DataLoader (`knobs.shuffle`)
    shuffle: bool = False
    # the samples each (step, micro-batch, rank) drew where the order is the library's own (`knobs.rank_seeds`):
    # recorded on the route and checked to deal each epoch's samples once (`drawn_order`), then trained on here
    order: tuple[tuple[int, int, int, tuple[int, ...]], ...] | None = None
    # the stream in epochs of `knobs.EPOCH_STEPS` steps whose last window is one micro-batch per rank: the Trainer's,
    # and Accelerate's sequential DataLoader whose end `accumulate()` syncs at
    partial_window: bool = False
    # the model's first layer frozen before it is wrapped (`knobs.freeze_first`), on the route and here alike
    frozen: bool = False
    # Adam's beta1 cycled by DeepSpeed's OneCycle (`knobs.onecycle_beta1`), its beta2 this one's `betas[1]`
    cycle_momentum: bool = False
    # the Trainer's model: "lm" (a causal LM, the token mean) or "classify" (a sequence classifier: `knobs.Knobs.head`)
    head: str = "lm"

    def betas_at(self, step: int) -> tuple[float, float]:
        """Adam's betas at optimizer step `step`: the configured ones, or beta1 as the cycle documents it."""
        from ds_doctor.probes.equivalence.knobs import onecycle_beta1

        return (onecycle_beta1(step), self.betas[1]) if self.cycle_momentum else self.betas

    def module(self, subject: Subject, world_size: int) -> Any:
        """A fresh module of `subject` for `world_size`, its first layer frozen where the setting says so: what
        every route wraps and the reference trains."""
        return self.freeze(subject.build(world_size))

    def freeze(self, module: Any) -> Any:
        """`module` with its first layer frozen where the setting says so (`knobs.freeze_first`), else as it is: the
        one rule for every route's module and its reference's, the Trainer's LM too."""
        from ds_doctor.probes.equivalence.knobs import freeze_first

        return freeze_first(module) if self.frozen else module

    def lrs(self, step: int) -> list[float]:
        """Each parameter group's lr at optimizer step `step`, from the documented schedule (never the route's)."""
        from ds_doctor.probes.equivalence import knobs

        at = step * self.stride
        if self.schedule.startswith("deepspeed"):
            scale = knobs.deepspeed_factor(at, self.schedule.partition("-")[2] or "decay")
        elif self.schedule in knobs.TORCH_SCHEDULES:
            scale = knobs.sequential_factor(at)
        else:
            scale = 1.0 if self.schedule == "constant" else knobs.linear_factor(at, self.total)
        rates = [g["lr"] for g in knobs.group_settings(self.groups, self.lr, self.weight_decay)]
        # OneCycle: one floor and ceiling for every group (a float: releases before 0.19.6 take no list)
        if self.schedule == "deepspeed-onecycle":
            rates = [self.lr] * len(rates)
        return [(self.peak if self.peak is not None else rate) * scale for rate in rates]

    def optimizer(self, model: Any) -> Any:
        """The torch optimizer over `model`'s parameter groups (`param_groups`), as the user's code builds it: every
        route's torch optimizer and the references' own."""
        if self.muon:
            from ds_doctor.probes.equivalence import muon

            named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
            group = {"named": named, "lr": self.lr, "weight_decay": self.weight_decay}
            return muon.optimizer([group], self.lr, self.betas, self.eps)
        return self.optimizer_over(self.param_groups(model.named_parameters()))

    def optimizer_over(self, params: Any) -> Any:
        """The torch AdamW (Adam where `adamw` is off) over `params` (parameters or groups): also the one a client
        passes to `deepspeed.initialize`."""
        import torch

        if self.momentum is not None:
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        kind = torch.optim.AdamW if self.adamw else torch.optim.Adam
        return kind(params, lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay)

    def param_groups(self, named: Any) -> list[dict[str, Any]]:
        """The optimizer's parameter groups of `named` ((name, parameter) pairs), as the user's code builds them."""
        from ds_doctor.probes.equivalence import knobs

        return knobs.split(
            ((n, p) for n, p in named if p.requires_grad), self.groups, self.lr, self.weight_decay
        )

    def describe(self) -> str:
        clip = f"clip {self.clip:g}" if self.clip else "no clipping"
        groups = {
            "one": "",
            "decay": ", biases and norms without weight decay",
            "rates": ", biases and norms without weight decay at their own lr",
        }[self.groups]
        schedule = "" if self.schedule == "constant" else f", {self.schedule} warm-up schedule"
        kind = "AdamW" if self.adamw else "Adam"
        if self.momentum is not None:
            kind = f"SGD (momentum {self.momentum:g})"
        if self.muon:
            kind = "Muon (AdamW off the matrices)"
        return (
            f"gradient_accumulation_steps={self.accumulation}, micro batch {self.micro_batch}, {clip}, "
            f"{kind} lr {self.lr:g}{groups}{schedule}, {self.dtype}"
        )


@dataclasses.dataclass
class StepRecord:
    """One optimizer step of a run: the global loss (mean over the global batch), the global gradient norm before
    clipping (None where the route does not expose it), the lr used, and every parameter's full value after it."""

    loss: float
    grad_norm: float | None
    lr: float
    params: dict[str, Any]
    # the reference's: see equivalence_bounds
    allowance: dict[str, float] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: the "shuffle" knob's sample `i` is the regression pair of seed SAMPLE_SEED + i
SAMPLE_SEED = 500_000


def micro_seed(step: int, micro: int, rank: int) -> int:
    """The seed of micro-batch `micro` of optimizer step `step` on rank `rank`: one data stream for every route."""
    return 100_003 * step + 1_009 * micro + rank + 7


@dataclasses.dataclass
class Subject:
    """The model a case trains and the loss of one micro-batch, as the user's training code would compute it."""

    build: Callable[[int], Any]  # world size -> a fresh module (the same weights every time)
    user: Any = None  # the user's Trainable (`--model`), else the family's MLP regression
    spec: str = "ds_doctor.probes.shared.models:build_mlp (MSE regression)"

    def micro_loss(
        self,
        model: Any,
        step: int,
        micro: int,
        rank: int,
        micro_batch: int,
        *,
        dtype: Any,
        device: Any,
        indices: Sequence[int] | None = None,
    ) -> Any:
        """The loss of one micro-batch through `model` (a module or a wrapper: DDP, FSDP, an engine); `indices`: the
        samples a DataLoader drew (the "shuffle" knob), each its own regression pair, instead of the step's stream."""
        import torch

        if indices is not None:
            pairs = [batch(1, dtype=dtype, device=device, seed=SAMPLE_SEED + i) for i in indices]
            x, y = torch.cat([p[0] for p in pairs]), torch.cat([p[1] for p in pairs])
            return torch.nn.functional.mse_loss(model(x), y)
        seed = micro_seed(step, micro, rank)
        if self.user is not None:
            return self.user.loss(model, micro_batch, device=device, dtype=dtype, seed=seed)
        x, y = batch(micro_batch, dtype=dtype, device=device, seed=seed)
        return torch.nn.functional.mse_loss(model(x), y)


def family_subject() -> Subject:
    return Subject(build=lambda _world_size: build_mlp(seed=0))


def user_subject(options: RankOptions, text: str | None = None) -> Subject | None:
    """The user's `--model` (or the model spec `text`), built with the seed every route uses; None when there is
    none. A factory that takes the world size gets the route's; the reference builds it as a single process would
    (world size 1)."""
    from ds_doctor.plugins.usersetup import user_model

    spec = user_model.ModelSpec.parse(text) if text else options.model_spec()
    if spec is None:
        return None
    trainable = user_model.build(spec, 1, 0)

    def build(world_size: int) -> Any:
        return user_model.build(spec, world_size, 0).module

    return Subject(build=build, user=trainable, spec=trainable.describe())


def current_subject(options: RankOptions, text: str | None = None) -> Subject:
    """The model a case trains: `text` (a route's own model spec, e.g. a planted one), else `--model`, else the
    family's MLP."""
    return user_subject(options, text) or family_subject()


def full_params(module: Any, names: Callable[[str], str] = lambda n: n, dtype: Any = None) -> dict[str, Any]:
    """Every parameter as a detached CPU copy (fp32 unless `dtype`), under its original name."""
    import torch

    return {
        names(n): p.detach().to("cpu", dtype or torch.float32, copy=True)
        for n, p in module.named_parameters()
    }


def reference(
    subject: Subject, hyper: Hyper, world_size: int, lrs: Sequence[float] | None = None
) -> list[StepRecord]:
    """The single-process fp32 run over the same global batches, each step with its allowances (the float64 run's
    distance, `ds_doctor.probes.equivalence.bounds`); `lrs`: the lr of each step where the route follows a
    schedule of its own
    (else the configured lr throughout)."""
    import torch

    single, initial, _ = _run(subject, hyper, world_size, lrs, torch.float32)
    double, _, exact = _run(subject, hyper, world_size, lrs, torch.float64)
    kernel = kernel_epsilon(hyper.betas) if hyper.kernel == "deepspeed" else 0.0
    noise = None
    if hyper.dtype != "float32":  # the reference once more in the route's dtype: its rounding, measured
        rough = _run(subject, hyper, world_size, lrs, getattr(torch, hyper.dtype))[2]
        noise = noise_allowances(rough, exact, lambda step, name: _rate(hyper, lrs, step, name), hyper.betas)
    for record, extra in zip(single, allowances(single, double, kernel, initial, noise), strict=True):
        record.allowance = extra
    return single


def _rate(hyper: Hyper, lrs: Sequence[float] | None, step: int, name: str) -> float:
    """The lr parameter `name` steps at in step `step`: the route's where it is copied, else its group's."""
    from ds_doctor.probes.equivalence.knobs import group_of

    return lrs[step] if lrs is not None else hyper.lrs(step)[group_of(name, hyper.groups)]


def _run(
    subject: Subject, hyper: Hyper, world_size: int, lrs: Sequence[float] | None, dtype: Any
) -> tuple[list[StepRecord], dict[str, Any], list[dict[str, Any]]]:
    trainee = _trainee(subject, hyper, dtype)
    model = trainee[0]
    initial = full_params(model, dtype=dtype)
    records, grads, before = [], [], initial
    for step in range(hyper.steps):
        lr = [lrs[step]] if lrs is not None else hyper.lrs(step)
        loss, norm = _step(subject, trainee, hyper, world_size, step, lr, dtype)
        records.append(StepRecord(float(loss), float(norm), lr[0], full_params(model, dtype=dtype)))
        grads.append(_adam_input(hyper, named_grads(model), before))
        before = records[-1].params
    return records, initial, grads


def _adam_input(hyper: Hyper, grads: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """What Adam normalises: the gradient, plus weight_decay times the parameter for Adam's L2 (torch's Adam adds it
    to the gradient before the moments), so an element where the two cancel is near-cancellation too."""
    from ds_doctor.probes.equivalence.knobs import group_of, group_settings

    if hyper.adamw or hyper.momentum is not None or hyper.muon:
        return grads
    decay = [g["weight_decay"] for g in group_settings(hyper.groups, hyper.lr, hyper.weight_decay)]
    return {n: g + decay[group_of(n, hyper.groups)] * before[n].to(g.dtype) for n, g in grads.items()}


def named_grads(model: Any) -> dict[str, Any]:
    """Each trainable parameter's gradient of the last step (clipped as the step used it), by name."""
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _trainee(subject: Subject, hyper: Hyper, dtype: Any) -> tuple[Any, list[Any], Any]:
    """The reference's model (one process), its trainable parameters, and the optimizer `hyper` names."""

    model = hyper.module(subject, 1).to("cpu", dtype)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    return model, params, hyper.optimizer(model)


def _step(
    subject: Subject,
    trainee: tuple[Any, list[Any], Any],
    hyper: Hyper,
    world_size: int,
    step: int,
    lr: Sequence[float],
    dtype: Any,
) -> tuple[Any, Any]:
    """One reference step of `trainee` (`_trainee`'s) at `lr`, each group's (one for all where it holds one): the
    global loss and the gradient norm before clipping."""
    import torch

    model, params, optimizer = trainee

    for i, group in enumerate(optimizer.param_groups):
        group["lr"] = lr[i] if len(lr) > 1 else lr[0]
        if hyper.cycle_momentum:
            group["betas"] = hyper.betas_at(step)
    loss = _accumulate(subject, model, params, hyper, world_size, step, dtype)
    norm = torch.nn.utils.clip_grad_norm_(params, hyper.clip) if hyper.clip else _norm(params)
    optimizer.step()
    return loss, norm


def reference_outputs(
    subject: Subject, hyper: Hyper, world_size: int, lrs: Sequence[float] | None, at_step: int, rank: int
) -> dict[str, Any]:
    """Each module's output on `rank`'s micro-batch 0 of step `at_step` (0-based) in the fp32 reference, and each
    output's gradient from that micro-batch's loss over the accumulation steps: the steps before it replayed as
    `reference` runs them (`ds_doctor.probes.equivalence.where`). {"outputs": ..., "grads": ...}."""
    import torch

    from ds_doctor.probes.equivalence.where import recording

    dtype = torch.float32
    trainee = _trainee(subject, hyper, dtype)
    for step in range(at_step):
        _step(
            subject,
            trainee,
            hyper,
            world_size,
            step,
            [lrs[step]] if lrs is not None else hyper.lrs(step),
            dtype,
        )
    model = trainee[0]
    grads: dict[str, Any] = {}
    with recording(model, grads) as outputs:
        loss = subject.micro_loss(
            model,
            at_step,
            0,
            rank,
            hyper.micro_batch,
            dtype=dtype,
            device="cpu",
            indices=drawn_samples(hyper, at_step, 0, rank, world_size),
        )
    if loss.requires_grad:  # as the route's backward of micro-batch 0: the loss over the accumulation steps
        (loss / hyper.accumulation).backward()
    return {"outputs": outputs, "grads": grads}


def _accumulate(
    subject: Subject, model: Any, params: list[Any], hyper: Hyper, world_size: int, step: int, dtype: Any
) -> Any:
    """Each simulated rank's accumulation window (loss / accumulation, backward), then the ranks' gradients summed
    in rank order and divided by the world size, as an all-reduce average does; the global loss likewise. Under the
    partial window an epoch's last window is one micro-batch, its loss still divided by the accumulation steps: as
    Accelerate's `backward` divides every micro-batch's (and DeepSpeed's engine, `scale_wrt_gas`)."""
    import torch

    grads: list[list[Any]] = []
    total = torch.zeros((), dtype=dtype)
    micros = epoch_window(step, hyper.accumulation, hyper.partial_window)
    for rank in range(world_size):
        for p in params:
            p.grad = None
        window = torch.zeros((), dtype=dtype)
        for micro in range(micros):
            loss = subject.micro_loss(
                model,
                step,
                micro,
                rank,
                hyper.micro_batch,
                dtype=dtype,
                device="cpu",
                indices=drawn_samples(hyper, step, micro, rank, world_size),
            )
            (loss / hyper.accumulation).backward()
            window += loss.detach().to(dtype)
        total += window
        grads.append([p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params])
    for i, p in enumerate(params):
        summed = grads[0][i].clone()
        for rank_grads in grads[1:]:
            summed += rank_grads[i]
        p.grad = summed / world_size
    return total / (micros * world_size)


def drawn_samples(hyper: Hyper, step: int, micro: int, rank: int, world_size: int) -> Sequence[int] | None:
    """The sample indices a route's DataLoader gives micro-batch `micro` of step `step` on `rank` (None where the
    route trains on the step's stream instead): the ones each rank drew (`order`), the order Accelerate documents
    for a shuffled DataLoader, or, under the partial window, a sequential DataLoader's batches dealt to the ranks in
    turn, each epoch over the same samples."""
    if hyper.order is not None:
        return _by_draw(hyper.order)[(step, micro, rank)]
    if hyper.shuffle:
        return documented_order(step, micro, rank, hyper.micro_batch, hyper.accumulation, world_size)
    if hyper.partial_window:
        return sequential_order(step, micro, rank, hyper.micro_batch, hyper.accumulation, world_size, True)
    return None


@functools.cache
def _by_draw(
    order: tuple[tuple[int, int, int, tuple[int, ...]], ...],
) -> dict[tuple[int, int, int], list[int]]:
    """`Hyper.order` by (step, micro-batch, rank), built once per order."""
    return {(s, m, r): list(i) for s, m, r, i in order}


def _norm(params: list[Any]) -> Any:
    import torch

    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))


def gaps(
    reference_run: Sequence[StepRecord], route: Sequence[StepRecord]
) -> tuple[list[list[Gap]], list[str]]:
    """Per step, each quantity's difference and scale (2-norms in float64); and the parameters one side lacks. Over
    the steps both took (a route that took fewer or more is `steps_finding`'s)."""
    import torch

    out, missing = [], set()
    for ref, got in zip(reference_run, route, strict=False):
        extra = ref.allowance
        step = [
            Gap(
                "loss",
                "loss",
                abs(got.loss - ref.loss),
                abs(ref.loss),
                got.loss,
                ref.loss,
                extra.get("loss", 0.0),
            )
        ]
        if got.grad_norm is not None and ref.grad_norm is not None:
            step.append(
                Gap(
                    "grad_norm",
                    "grad_norm",
                    abs(got.grad_norm - ref.grad_norm),
                    abs(ref.grad_norm),
                    got.grad_norm,
                    ref.grad_norm,
                    extra.get("grad_norm", 0.0),
                )
            )
        missing |= set(ref.params) ^ set(got.params)
        for name in sorted(set(ref.params) & set(got.params)):
            a, b = got.params[name].double(), ref.params[name].double()
            error = float(torch.linalg.vector_norm(a - b)) if a.shape == b.shape else float("inf")
            step.append(
                Gap("update", name, error, float(torch.linalg.vector_norm(b)), allowance=extra.get(name, 0.0))
            )
        out.append(step)
    return out, sorted(missing)


def bitwise_equal(reference_run: Sequence[StepRecord], route: Sequence[StepRecord]) -> bool:
    import torch

    return len(reference_run) == len(route) and all(
        a.loss == b.loss
        and a.grad_norm == b.grad_norm
        and a.params.keys() == b.params.keys()
        and all(torch.equal(a.params[n], b.params[n]) for n in a.params)
        for a, b in zip(reference_run, route, strict=False)
    )


def clipped_steps(run: Sequence[StepRecord], clip: float) -> int:
    """How many steps the clipping engaged at (the gradient norm above the threshold)."""
    return sum(1 for r in run if clip and r.grad_norm is not None and r.grad_norm > clip)


def digest(tensor: Any) -> str:
    """A tensor's dtype, shape and exact bytes, as one string (two tensors equal bit for bit have the same)."""
    import torch

    t = tensor.detach().to("cpu").contiguous()
    raw = t.reshape(-1).view(torch.uint8) if t.numel() else torch.zeros(0, dtype=torch.uint8)
    try:
        data = raw.numpy().tobytes()
    # a node without numpy (torch's numpy bridge is gone): slower, same bytes
    except (RuntimeError, TypeError):
        data = bytes(raw.tolist())
    return (
        f"sha256:{hashlib.sha256(data).hexdigest()[:24]} {str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
    )

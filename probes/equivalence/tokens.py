"""The Trainer route's stream and its reference: right-padded token sequences dealt to ranks and micro-batches as the
Trainer's sequential sampler and Accelerate's per-rank batches deal them, and the token mean over the global batch of
each optimizer step computed in plain torch (`token_reference`), its module outputs at a step (`token_outputs`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ds_doctor.probes.equivalence.subject import Hyper, StepRecord

SEQUENCE = 8
PAD = 0


def _config(kind: str) -> Any:
    """The tiny config of `kind`, its dropout off: dropout is randomness no reference reproduces (GPT-2 drops 0.1)."""
    from ds_doctor.plugins.usersetup import tiny_config

    config = tiny_config(kind)
    for key, value in config.to_dict().items():
        if isinstance(value, float) and ("dropout" in key or "pdrop" in key):
            setattr(config, key, 0.0)
    return config


def build_lm(kind: str, seed: int = 0) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    config = _config(kind)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).to(torch.float32)


#: the matrix's "classify" head: a sequence classifier over this many classes, sample i of class i % NUM_LABELS
NUM_LABELS = 3


def build_classifier(kind: str, seed: int = 0) -> Any:
    """The same tiny model with a sequence-classification head (`AutoModelForSequenceClassification`: the logits of
    each row's last token that is not padding), the knob matrix's "classify" head."""
    import torch
    from transformers import AutoModelForSequenceClassification

    config = _config(kind)
    config.num_labels, config.pad_token_id = NUM_LABELS, PAD
    torch.manual_seed(seed)
    return AutoModelForSequenceClassification.from_config(config).to(torch.float32)


def build_model(kind: str, head: str = "lm") -> Any:
    """The Trainer route's model: the causal LM, or the classifier (`head`)."""
    return build_classifier(kind) if head == "classify" else build_lm(kind)


def sample(index: int, vocab: int, first_label_masked: bool = False, head: str = "lm") -> dict[str, Any]:
    """Sample `index` of the stream: a right-padded sequence of 2..SEQUENCE real tokens, labels -100 on padding (and
    on the first token where asked: a causal LM never predicts it, so the loss is the same)."""
    import torch

    length = 2 + (5 * index) % (SEQUENCE - 1)
    ids = torch.randint(1, vocab, (SEQUENCE,), generator=torch.Generator().manual_seed(7919 + index))
    mask = torch.arange(SEQUENCE) < length
    labels = torch.where(mask, ids, -100)
    if first_label_masked:
        labels[0] = -100
    if head == "classify":  # one class a row
        labels = torch.tensor(index % NUM_LABELS)
    return {"input_ids": torch.where(mask, ids, PAD), "attention_mask": mask.long(), "labels": labels}


def micro_indices(step: int, micro: int, rank: int, hyper: Hyper, world_size: int) -> Sequence[int]:
    """The samples of one rank's micro-batch, as the Trainer's sequential sampler and Accelerate's per-rank batches
    deal them: batch b = (step * accumulation + micro) * world_size + rank of the stream; under the matrix's
    shuffle, the order Accelerate documents for the Trainer's sampler seeded with its `data_seed`; under the
    matrix's partial window, epochs of EPOCH_STEPS steps, each over the same samples in order (a sequential sampler
    starts again at each), the last window one micro-batch per rank."""
    from ds_doctor.probes.equivalence.knobs import DATA_SEED, documented_order, sequential_order

    if hyper.shuffle:
        return documented_order(
            step,
            micro,
            rank,
            hyper.micro_batch,
            hyper.accumulation,
            world_size,
            seed=DATA_SEED,
            partial_window=hyper.partial_window,
        )
    return sequential_order(
        step, micro, rank, hyper.micro_batch, hyper.accumulation, world_size, hyper.partial_window
    )


def predicted_over_counted(
    hyper: Hyper, world_size: int, first_label_masked: bool = False
) -> tuple[int, int]:
    """The first step's global batch: the label tokens a causal LM predicts (labels shifted by one), and the labels
    that are not -100 as given (what the Trainer counts as num_items_in_batch where it does not shift)."""
    batches = [
        stacked(micro_indices(0, k, r, hyper, world_size), 2, first_label_masked)
        for r in range(world_size)
        for k in range(hyper.accumulation)
    ]
    return (
        sum(int((b["labels"][:, 1:] != -100).sum()) for b in batches),
        sum(int((b["labels"] != -100).sum()) for b in batches),
    )


def stacked(
    indices: Sequence[int], vocab: int, first_label_masked: bool = False, head: str = "lm"
) -> dict[str, Any]:
    import torch

    samples = [sample(i, vocab, first_label_masked, head) for i in indices]
    return {key: torch.stack([s[key] for s in samples]) for key in samples[0]}


def window(hyper: Hyper, step: int, last_window: int | None) -> int:
    """The micro-batches of optimizer step `step` on each rank: the accumulation steps, or fewer in a last window the
    stream cuts short (the route's last step, or each epoch's under the matrix's partial window)."""
    from ds_doctor.probes.equivalence.knobs import epoch_window

    if hyper.partial_window:
        return epoch_window(step, hyper.accumulation, True)
    return last_window if last_window and step == hyper.steps - 1 else hyper.accumulation


def token_reference(
    kind: str,
    hyper: Hyper,
    world_size: int,
    lrs: list[float],
    last_window: int | None = None,
    label_smoothing: float = 0.0,
    per_device: bool = False,
) -> list[StepRecord]:
    """Plain torch, single process: each step's loss is the summed token cross-entropy of the global batch over its
    label-token count (`per_device`: each rank's over its own count, the ranks averaged, as the Trainer of
    transformers 4.46.0-4.47 runs here: `trainer.per_device_tokens`); gradients accumulate over every rank's
    micro-batches; clip; AdamW. Run in fp32 and again in float64 for the allowances
    (ds_doctor.probes.equivalence.bounds)."""
    import torch

    from ds_doctor.probes.equivalence.bounds import allowances, noise_allowances

    shape = (last_window, label_smoothing, per_device)
    single, initial, grads = _token_run(kind, hyper, world_size, lrs, torch.float32, shape)
    double, _, exact = _token_run(kind, hyper, world_size, lrs, torch.float64, shape)
    # the route's rounding, measured: the reference once more in the route's dtype; in fp32 the reference's own
    # fp32 gradients (an element whose exact gradient is below fp32's rounding, or near Adam's eps, moves with it)
    rough = grads
    if hyper.dtype != "float32":
        rough = _token_run(kind, hyper, world_size, lrs, getattr(torch, hyper.dtype), shape)[2]
    adam_eps = hyper.eps if hyper.momentum is None else None  # SGD has no eps
    noise = noise_allowances(
        rough, exact, lambda step, _name: lrs[step], hyper.betas, adam_eps
    )  # one rate: the Trainer's
    for record, extra in zip(single, allowances(single, double, 0.0, initial, noise), strict=True):
        record.allowance = extra
    return single


def _token_run(
    kind: str, hyper: Hyper, world_size: int, lrs: list[float], dtype: Any, shape: Shape
) -> tuple[list[StepRecord], dict[str, Any], list[dict[str, Any]]]:
    """`shape`: the last window's micro-batches (None: a whole window), the label smoothing and whether each rank
    normalises by its own tokens."""
    from ds_doctor.probes.equivalence.subject import named_grads

    model, params, optimizer = _token_trainee(kind, dtype, hyper)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    records, grads = [], []
    for step in range(hyper.steps):
        loss, norm = _token_step((model, params, optimizer), hyper, world_size, step, lrs[step], dtype, shape)
        records.append(
            StepRecord(loss, norm, lrs[step], {n: p.detach().clone() for n, p in model.named_parameters()})
        )
        grads.append(named_grads(model))
    return records, initial, grads


def _token_trainee(kind: str, dtype: Any, hyper: Hyper) -> tuple[Any, list[Any], Any]:
    """The reference's model and AdamW, its weight-decay groups as the Trainer documents them (`knobs.group_of`:
    no decay for biases and normalisation layers), read on the names here, not from the Trainer."""

    # the route's first layer frozen where it is
    model = hyper.freeze(build_model(kind, hyper.head)).to(dtype)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    return model, params, hyper.optimizer(model)


#: the reference's shape of a run: (the last window's micro-batches or None, the label smoothing, per-device tokens)
Shape = tuple[int | None, float, bool]


def _predicted(batches: Sequence[dict[str, Any]]) -> int:
    """The label tokens a causal LM predicts in `batches` (labels shifted, -100 ignored)."""
    return sum(int((b["labels"][:, 1:] != -100).sum()) for b in batches)


def _token_batches(
    vocab: int, hyper: Hyper, world_size: int, step: int, last_window: int | None
) -> tuple[list[dict[str, Any]], int]:
    """Step `step`'s micro-batches, rank by rank (rank r's micro-batch k at r * window + k), and the label tokens a
    causal LM predicts in them."""
    batches = [
        stacked(micro_indices(step, k, r, hyper, world_size), vocab, head=hyper.head)
        for r in range(world_size)
        for k in range(window(hyper, step, last_window))
    ]
    return batches, 0 if hyper.head == "classify" else _predicted(batches)


def _summed(model: Any, b: dict[str, Any], smoothing: float) -> Any:
    """A micro-batch's summed token cross-entropy (labels shifted, -100 ignored)."""
    import torch

    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]),
        b["labels"][:, 1:].reshape(-1),
        ignore_index=-100,
        reduction="sum",
        label_smoothing=smoothing,  # as the Trainer's LabelSmoother: (1 - e) nll + e mean(-log p)
    )


def _class_mean(model: Any, b: dict[str, Any]) -> Any:
    """A micro-batch's mean cross-entropy over its rows' classes, as a sequence-classification head documents its
    loss (the last real token's logits; no count of anything passed in)."""
    import torch

    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
    return torch.nn.functional.cross_entropy(logits, b["labels"])


def _class_step(
    trainee: tuple[Any, list[Any], Any], hyper: Hyper, world_size: int, step: int, lr: float, dtype: Any
) -> tuple[float, float]:
    """The "classify" head's step as the Trainer documents it for a model that takes no count of the batch's items:
    each micro-batch's mean loss divided by the accumulation steps, the ranks' gradients averaged (DDP); the loss
    logged is the mean of the micro-batches' means."""
    import torch

    model, params, optimizer = trainee
    batches, _ = _token_batches(model.config.vocab_size, hyper, world_size, step, None)
    per_rank = len(batches) // world_size
    total = torch.zeros((), dtype=dtype)
    ranks: list[list[Any]] = []
    for rank in range(world_size):
        optimizer.zero_grad(set_to_none=True)
        for b in batches[rank * per_rank : (rank + 1) * per_rank]:
            share = _class_mean(model, b) / (per_rank * world_size)
            share.backward()
            total += share.detach().to(dtype)
        ranks.append([p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params])
    return float(total), _reduced_and_stepped(trainee, ranks, hyper, lr)


def _token_step(
    trainee: tuple[Any, list[Any], Any],
    hyper: Hyper,
    world_size: int,
    step: int,
    lr: float,
    dtype: Any,
    shape: Shape,
) -> tuple[float, float]:
    import torch

    if hyper.head == "classify":
        return _class_step(trainee, hyper, world_size, step, lr, dtype)
    model, params, optimizer = trainee
    batches, tokens = _token_batches(model.config.vocab_size, hyper, world_size, step, shape[0])
    per_rank = len(batches) // world_size
    total = torch.zeros((), dtype=dtype)
    shares = torch.zeros((), dtype=dtype)  # per device: each rank's sum over its own count and the world size
    ranks: list[list[Any]] = []
    for rank in range(
        world_size
    ):  # each rank's window on its own, then the ranks summed: an all-reduce's order
        optimizer.zero_grad(set_to_none=True)
        own = batches[rank * per_rank : (rank + 1) * per_rank]
        # the global count, or the rank's own with the ranks averaged
        over = _predicted(own) * world_size if shape[2] else tokens
        for b in own:
            summed = _summed(model, b, shape[1])
            (summed / over).backward()
            total += summed.detach()
            shares += summed.detach() / over
        ranks.append([p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params])
    return float(shares if shape[2] else total / tokens), _reduced_and_stepped(trainee, ranks, hyper, lr)


def _reduced_and_stepped(
    trainee: tuple[Any, list[Any], Any], ranks: list[list[Any]], hyper: Hyper, lr: float
) -> float:
    """The ranks' gradients summed in rank order (an all-reduce's), the step's rate set, clipped, stepped: the
    gradient norm before clipping."""
    import torch

    _, params, optimizer = trainee
    for i, p in enumerate(params):
        p.grad = ranks[0][i].clone()
        for rank_grads in ranks[1:]:
            p.grad += rank_grads[i]
    for group in optimizer.param_groups:
        group["lr"] = lr
    norm = torch.nn.utils.clip_grad_norm_(params, hyper.clip) if hyper.clip else _total_norm(params)
    optimizer.step()
    return float(norm)


def _total_norm(params: list[Any]) -> Any:
    import torch

    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))


def token_outputs(
    kind: str, hyper: Hyper, world_size: int, lrs: list[float], shape: Shape, at_step: int, rank: int
) -> dict[str, Any]:
    """Each module's output on `rank`'s micro-batch 0 of step `at_step` in the token-mean reference (fp32), the steps
    before it replayed, and each output's gradient from that micro-batch's share of the global loss as the rank's
    backward must give it (its summed cross-entropy over the step's label tokens, times the world size: DDP averages
    the ranks' gradients). {"outputs": ..., "grads": ...}."""
    import torch

    from ds_doctor.probes.equivalence.where import recording

    trainee = _token_trainee(kind, torch.float32, hyper)
    for step in range(at_step):
        _token_step(trainee, hyper, world_size, step, lrs[step], torch.float32, shape)
    model = trainee[0]
    batches, tokens = _token_batches(model.config.vocab_size, hyper, world_size, at_step, shape[0])
    per_rank = window(hyper, at_step, shape[0])
    grads: dict[str, Any] = {}
    # a classifier's rank divides its micro-batch's mean by the window alone (DDP averages the parameters'
    # gradients afterwards, never the outputs')
    if hyper.head == "classify":
        with recording(model, grads) as outputs:
            mean = _class_mean(model, batches[rank * per_rank])
        (mean / per_rank).backward()
        return {"outputs": outputs, "grads": grads}
    with recording(model, grads) as outputs:
        summed = _summed(model, batches[rank * per_rank], shape[1])
    if shape[2]:  # the rank's own backward divides by its own count
        (summed / _predicted(batches[rank * per_rank : (rank + 1) * per_rank])).backward()
    else:  # by the global count, times the world size (DDP averages the ranks)
        (summed / tokens * world_size).backward()
    return {"outputs": outputs, "grads": grads}

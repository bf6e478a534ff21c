"""The knobs where silent bugs of real releases live, and the matrix each route is driven over (issue 50).

A `Knobs` is one setting of them: precision, the accumulation window, clipping, the parameter groups (one; decay
groups that exclude biases and norms by name, as the Trainer's `get_decay_parameter_names` does; groups with their
own learning rates), a learning-rate schedule stepped per optimizer step (DeepSpeed's own `WarmupLR` and
`WarmupCosineLR` too), optimizer offload, whether DeepSpeed builds the optimizer and scheduler from its config or the
client passes them, DeepSpeed's fp32 gradient accumulation, Accelerate's `sync_each_batch`, the Trainer's label
smoothing, and a resume into a fresh engine. A catalog entry's `knobs` conditions are matched here (`fits`). A route
offers the knobs its library has (`offered`); which settings run is a covering design (`pairs`: every pair of two
knobs' values in at least one setting, greedily, the all-defaults setting first), plus the settings real bugs
needed, added by hand (`cases.needed`). Level 2 runs a slice, level 3 the pairs, `--matrix full` every combination.

What the reference needs of a setting is here too, computed as each library documents it and never read back from
the route: each parameter's group (`group_of`), each group's settings (`group_settings`) and the documented
schedules' factors (`linear_factor`, `deepspeed_factor`), which `subject.Hyper.lrs` turns into each group's rate at
each step. The settings real bugs needed are `cases.needed`.
Nothing here imports torch: `ds-doctor list` reads the cases.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import functools
import hashlib
import itertools
import json
import math
import operator
import pathlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

#: a "rates" setting's second group (no decay) steps at this multiple of the base rate
SECOND_GROUP_RATE = 0.1
#: the schedule: a linear warm-up over WARMUP optimizer steps, then a linear decay to 0 at TOTAL
WARMUP, TOTAL = 2, 6
#: `WarmupCosineLR`'s floor, a multiple of the base rate (its `cos_min_ratio`)
COS_MIN = 0.1
#: the "sgd" optimizer's momentum
MOMENTUM = 0.9
#: "shuffle": optimizer steps an epoch, the seed the job sets before preparing its DataLoader, and the Trainer's
#: `data_seed` (not its `seed`, 0: the two must not be confused)
EPOCH_STEPS, SHUFFLE_SEED, DATA_SEED = 2, 1234, 4321
#: `OneCycle`: its first half-cycle's length in scheduler steps, its stairs over it, its floor (a multiple of the
#: base rate, which is its ceiling: one for every group)
ONECYCLE_STEPS, ONECYCLE_STAIRS, ONECYCLE_MIN = 4, 2, 0.1
#: ...and its momentum where it cycles it (its default): Adam's beta1 from the first to the second, its defaults
ONECYCLE_MIN_MOM, ONECYCLE_MAX_MOM = 0.8, 0.9
#: torch's composite schedules ("sequential", "nested"): `LinearLR`'s start factor over the WARMUP steps, then
#: `CosineAnnealingLR` over TOTAL - WARMUP
SEQUENTIAL_START = 0.25
#: the schedules built of torch's own schedulers (a `SequentialLR`; "nested": that one inside another), which the
#: torch routes, Accelerate and a DeepSpeed client pass: each its own documented factor (`sequential_factor`)
TORCH_SCHEDULES = ("sequential", "nested")
#: the Trainer's "resume": the optimizer step its checkpoint is written at, inside the first epoch of EPOCH_STEPS
RESUME_AT = 1
#: ...and with "shuffle": inside the second epoch, where the resumed sampler must draw that epoch's order (a resume
#: inside the first draws epoch 0's order whether or not its epoch was restored)
SHUFFLED_RESUME_AT = EPOCH_STEPS + 1


@dataclasses.dataclass(frozen=True)
class Knobs:
    """One setting of the knobs; each field's default is the family's route as it was before the matrix."""

    precision: str = "fp32"  # "fp32" | "bf16" (fp16's loss scaler needs a GPU: not offered on a CPU)
    accumulation: int = 2  # the accumulation window, in micro-batches
    clip: bool = True  # clip to the global norm (0.05: engages at every step)
    groups: str = (
        "one"  # "one" | "decay" (biases and norms without weight decay) | "rates" (decay, own rates)
    )
    # "constant" | "warmup" (linear warm-up, then linear decay, per optimizer step); DeepSpeed's config schedulers
    # too: "warmup-lr" (WarmupLR, its max rate left to the default), "cosine" (WarmupCosineLR) and "onecycle" (OneCycle
    # with a staircase); torch's composites (TORCH_SCHEDULES, settings beside the designs): "sequential" (a
    # `SequentialLR` of a `LinearLR` warm-up and a `CosineAnnealingLR`) and "nested" (that `SequentialLR` the one
    # child of another, as a framework wraps the user's scheduler: its docs make the wrapper a no-op)
    schedule: str = "constant"
    offload: bool = False  # DeepSpeed ZeRO 1-3: the optimizer offloaded to the CPU
    source: str = "config"  # DeepSpeed: the optimizer (and scheduler) "config" builds, or the "client" passes
    # "adamw" | "adam" (Adam's L2 weight decay: torch's Adam, the config's "Adam" with adam_w_mode false) | "sgd"
    # (torch's SGD with momentum: the config's "SGD", the Trainer's "sgd") | "muon" (DeepSpeed ZeRO 1-3's "Muon":
    # Muon on the matrices, AdamW on the rest)
    optimizer: str = "adamw"
    accumulate_fp32: bool = False  # DeepSpeed ZeRO 1-3 in bf16: data_types.grad_accum_dtype "fp32"
    sync_each_batch: bool = False  # Accelerate: GradientAccumulationPlugin(sync_each_batch=True)
    smoothing: bool = False  # the Trainer: label_smoothing_factor 0.1
    # DeepSpeed and Accelerate: save at the middle step (their own checkpoint), load into a fresh engine in the
    # same process, go on
    resume: bool = False
    # Accelerate: the batches from a prepared DataLoader(shuffle=True) of sample indices with its seedable sampler,
    # EPOCH_STEPS steps an epoch (two epochs), `set_epoch` at each; the Trainer: its own shuffled sampler with
    # `data_seed` DATA_SEED over two epochs
    shuffle: bool = False
    # Accelerate with "shuffle": each rank seeds its own RNG (`set_seed(seed, device_specific=True)`) and the
    # DataLoader keeps Accelerate's default sampler (a plain RandomSampler, not the seedable one): the ranks must still
    # deal one permutation of each epoch between them (Accelerate synchronises the sampler's generator from rank 0)
    rank_seeds: bool = False
    # Accelerate with "shuffle": the job's own batch sampler (`EpochBatchSampler`: each `set_epoch` draws that epoch's
    # permutation from the job's seed plus the epoch, cut into micro-batches) handed to DataLoader(batch_sampler=...)
    # and prepared; its order is the seedable sampler's (`documented_order`), so a `set_epoch` that never reaches it
    # replays epoch 0 (Accelerate PR #3246)
    batch_sampler: bool = False
    # Accelerate with "shuffle": the loop never calls set_epoch, as Accelerate's checkpointing guide writes it (the
    # prepared DataLoader counts its own epochs); with "resume", load_state and then skip_first_batches alone
    no_set_epoch: bool = False
    # the Trainer: epochs of EPOCH_STEPS optimizer steps whose length is not a multiple of the accumulation window,
    # the last window of each one micro-batch per rank (two epochs)
    partial_window: bool = False
    # DeepSpeed ZeRO-3: `engine.offload_states()` then `engine.reload_states()` before the middle step (the RLHF
    # pattern of moving a trained model's states aside while another model generates)
    offload_states: bool = False
    # FSDP1: HYBRID_SHARD over a (world size, 1) mesh, replicas across the ranks and each shard group one rank (one
    # GPU per node, or a trainer's fsdp_size 1)
    hybrid: bool = False
    # torch's routes: the model and optimizer's state dict taken with DCP's `get_state_dict` before the first step
    # (a step-0 checkpoint, or a template for a later load: what torchtitan's PR #4382 patched around)
    state_dict_first: bool = False
    # every route: the model's first layer frozen (`requires_grad=False` before the route wraps it: a frozen
    # embedding or vision tower, a partly unfrozen model), so its parameters have no gradient, sit in no optimizer
    # group and must leave every step exactly as they were
    frozen: bool = False
    # DeepSpeed's OneCycle at its default `cycle_momentum` (True): Adam's beta1 cycled inversely to the rate, from
    # `cycle_min_mom` at construction; its beta2 is the optimizer's (the "onecycle" schedule alone turns it off)
    cycle_momentum: bool = False
    # the Trainer: "lm" (its causal LM, the loss a token mean over the accumulated batch) or "classify" (the same model
    # with a sequence-classification head, whose documented loss is each micro-batch's mean over its rows)
    head: str = "lm"
    # Accelerate with "shuffle": the prepared DataLoader's batch size is the global micro-batch (the per-process one
    # times the processes), asked split between the processes: "config" as Accelerate documents it since 0.28
    # (`DataLoaderConfiguration(split_batches=True)`), "keyword" as older scripts and its pre-1.0 docs write it
    # (`Accelerator(split_batches=True)`); each process trains its slice of every batch, and a prepared scheduler
    # steps once per optimizer step (not once per process)
    split: str = "none"

    def tokens(self) -> list[str]:
        """The settings that differ from the defaults, in a case name's words: a value's own ("bf16", "rates"),
        "ga<n>", "noclip", or a switch's name ("offload", "sync-each-batch")."""
        return [_word(name, getattr(self, name)) for name in self.changed()]

    def describe(self) -> str:
        return ", ".join(self.tokens()) or "the defaults"

    def changed(self) -> list[str]:
        """The knobs set away from their defaults, by field name."""
        base = Knobs()
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) != getattr(base, f.name)]

    def back(self, knob: str) -> Knobs:
        """This setting with `knob` back at its default."""
        return dataclasses.replace(self, **{knob: getattr(Knobs(), knob)})


def _word(knob: str, value: object) -> str:
    if knob == "accumulation":
        return f"ga{value}"
    if knob == "clip":
        return "noclip"
    if knob == "split":
        return f"split-{value}"
    return knob.replace("_", "-") if value is True else str(value)


#: every value of each knob, the default first
VALUES: dict[str, tuple[object, ...]] = {
    "precision": ("fp32", "bf16"),
    "accumulation": (2, 1, 4),
    "clip": (True, False),
    "groups": ("one", "decay", "rates"),
    "schedule": ("constant", "warmup"),
    "offload": (False, True),
    "source": ("config", "client"),
    "optimizer": ("adamw", "adam", "sgd", "muon"),
    "accumulate_fp32": (False, True),
    "sync_each_batch": (False, True),
    "smoothing": (False, True),
    "resume": (False, True),
    "shuffle": (False, True),
    "rank_seeds": (False, True),
    "batch_sampler": (False, True),
    "no_set_epoch": (False, True),
    "partial_window": (False, True),
    "offload_states": (False, True),
    "hybrid": (False, True),
    "state_dict_first": (False, True),
    "frozen": (False, True),
    "cycle_momentum": (False, True),
    "head": ("lm", "classify"),
    "split": ("none", "config", "keyword"),
}


def _offer(*names: str, **values: tuple[object, ...]) -> dict[str, tuple[object, ...]]:
    return {name: values.get(name, VALUES[name]) for name in names}


#: the knobs each kind of route offers, with the values it offers of each
TORCH_KNOBS = _offer(
    "precision", "accumulation", "clip", "groups", "schedule", "optimizer", optimizer=("adamw", "adam", "sgd")
)
#: (`batch_sampler` is not offered to the pairs: its one setting is added by hand, `cases.needed`; offered, it
#: re-drew the route's whole design, whose settings the catalog's measured records name)
ACCELERATE_KNOBS = {**TORCH_KNOBS, **_offer("sync_each_batch", "resume", "shuffle", "rank_seeds")}
#: Accelerate with a DeepSpeed plugin (ZeRO-2): the optimizer offloaded too, where Accelerate swaps the prepared torch
#: optimizer for DeepSpeed's CPU Adam of the same kind (`map_pytorch_optim_to_deepspeed`)
ACCELERATE_DEEPSPEED_KNOBS = {**TORCH_KNOBS, **_offer("offload")}
#: DeepSpeed's own schedulers, from the config (a client optimizer too: the engine builds them over it)
DEEPSPEED_SCHEDULES = ("warmup-lr", "cosine", "onecycle")
DEEPSPEED_KNOBS = {
    **TORCH_KNOBS,
    **_offer("schedule", "source", "resume", schedule=(*VALUES["schedule"], *DEEPSPEED_SCHEDULES)),
}
#: ZeRO 0 with bf16 and fp32 accumulation raises (`_do_optimizer_sanity_check`): offered from stage 1
#: and Muon (DeepSpeed's at ZeRO-1/2 since 0.17.6, at ZeRO-3 since 0.18.9; ZeRO-0 ran no Newton-Schulz before 0.19.7,
#: PR #8442: not offered there)
ZERO_KNOBS = {**DEEPSPEED_KNOBS, **_offer("offload", "accumulate_fp32", "optimizer")}
#: ZeRO-3 moves its states aside and back (`offload_states` / `reload_states`, since 0.15.2, PR #6011): only with the
#: config's FusedAdam (it asserts the class), no offload
ZERO3_KNOBS = {**ZERO_KNOBS, **_offer("offload_states")}
#: the Trainer builds its own groups (decay by name: "decay" turns weight decay on) at one rate; its resume is its
#: own checkpoint at optimizer step RESUME_AT (inside the first epoch) and `train(resume_from_checkpoint=...)` in a
#: fresh Trainer
TRAINER_KNOBS = _offer(
    "precision",
    "accumulation",
    "clip",
    "groups",
    "schedule",
    "optimizer",
    "smoothing",
    "shuffle",
    "resume",
    "partial_window",
    groups=("one", "decay"),
    optimizer=("adamw", "sgd"),  # the Trainer has no optim of torch's Adam (L2)
)


def allowed(knobs: Knobs) -> bool:
    """Settings that mean nothing are left out: `sync_each_batch` or a partial window without accumulation, an fp32
    accumulation of fp32 gradients, `offload_states` where DeepSpeed refuses it (see ZERO3_KNOBS); and Muon where
    the reference would not be DeepSpeed's documented Muon: only from the config, in fp32, one group, no clipping
    (ZeRO clips on the orthogonalised update), no resume."""
    # a resume of a shuffled order: settings of the Trainer and Accelerate added beside their designs
    # (`cases.beside`), not pairs
    if knobs.shuffle and knobs.resume:
        return False
    if knobs.rank_seeds and not knobs.shuffle:  # the ranks' seeds matter to a shuffled DataLoader only
        return False
    # the job's own batch sampler is a shuffled DataLoader's, seeded by the job (not each rank's seed)
    if knobs.batch_sampler and (not knobs.shuffle or knobs.rank_seeds):
        return False
    if knobs.no_set_epoch and not knobs.shuffle:  # the epoch matters to a shuffled DataLoader only
        return False
    # batches split between the processes: a shuffled DataLoader's batch size (the job's own batch sampler has its own)
    if knobs.split != "none" and (not knobs.shuffle or knobs.batch_sampler):
        return False
    if knobs.cycle_momentum and knobs.schedule != "onecycle":  # OneCycle's own momentum
        return False
    muon_fits = knobs.optimizer != "muon" or (
        knobs.precision == "fp32"
        and knobs.groups == "one"
        and knobs.source == "config"
        and not knobs.clip
        and not knobs.resume
    )
    # offload_states asserts DeepSpeed's FusedAdam (the config's Adam or AdamW) and no offload of its own
    states_fit = not knobs.offload_states or (
        knobs.source == "config" and knobs.optimizer in ("adamw", "adam") and not knobs.offload
    )
    return (
        muon_fits
        and states_fit
        and not ((knobs.sync_each_batch or knobs.partial_window) and knobs.accumulation == 1)
        and not (knobs.accumulate_fp32 and knobs.precision != "bf16")
    )


def combinations(offered: Mapping[str, Sequence[object]]) -> list[Knobs]:
    """Every allowed setting of the `offered` knobs (the others at their defaults), the defaults first."""
    out = []
    for values in itertools.product(*offered.values()):
        knobs = Knobs(**dict(zip(offered, values, strict=True)))  # type: ignore[arg-type]
        if allowed(knobs):
            out.append(knobs)
    return out


def pairs(offered: Mapping[str, Sequence[object]], needed: Iterable[Knobs] = ()) -> list[Knobs]:
    """A covering design of strength two (`draw`): the one stored in DESIGNS for these knobs and needs, else drawn
    here. A stored setting `allowed` refuses (the rules changed since it was written) draws the design again."""
    needed = tuple(needed)
    stored = _stored().get(fingerprint(offered, needed))
    if stored is not None:
        try:
            design = [Knobs(**setting) for setting in stored]
        except TypeError:  # a knob since renamed: no stored design is used
            design = []
        if design and all(allowed(setting) for setting in design):
            return design
    return draw(offered, needed)


def draw(offered: Mapping[str, Sequence[object]], needed: Iterable[Knobs] = ()) -> list[Knobs]:
    """A covering design of strength two: every pair of values of two offered knobs appears in at least one
    setting (of those `allowed`), the all-defaults setting first and `needed` next; then, greedily, the setting that
    covers the most pairs not yet covered (the first in `combinations`' order on a tie). Deterministic."""
    candidates, each, covered = _coverage(tuple(offered.items()))
    chosen = [candidates[0], *(k for k in needed if k != candidates[0])]
    done = functools.reduce(operator.or_, (covered(k) for k in chosen), 0)
    left = functools.reduce(operator.or_, each, 0) & ~done
    while left:
        best = max(range(len(candidates)), key=lambda i: (each[i] & left).bit_count())
        chosen.append(candidates[best])
        left &= ~each[best]
    return chosen


#: the designs `draw` gave the matrix's routes, by `fingerprint`: drawing them cost every process that lists the
#: cases (each `ds-doctor run` and `list`, each rank of an equivalence case) 0.6 s of CPU, most of a `list`. Generated:
#: python -m ds_doctor.probes.equivalence.cases --write; a test checks it is what `draw` gives.
DESIGNS = pathlib.Path(__file__).with_name("designs.json")


def fingerprint(offered: Mapping[str, Sequence[object]], needed: Iterable[Knobs]) -> str:
    """What a design is drawn from (the knobs offered with their values, the settings needed, every default), hashed."""
    what = repr((tuple((name, tuple(values)) for name, values in offered.items()), tuple(needed), Knobs()))
    return hashlib.sha256(what.encode()).hexdigest()[:16]


@functools.cache
def _stored() -> dict[str, list[dict[str, Any]]]:
    try:
        designs = json.loads(DESIGNS.read_text(encoding="utf-8"))["designs"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}  # drawn in each process, as before the file
    return designs if isinstance(designs, dict) else {}


def render(designs: Mapping[str, Sequence[Knobs]]) -> str:
    """DESIGNS' text: each design a list of settings, a setting its knobs away from the defaults, one a line."""
    lines = [
        '{"format": 1, "generated": "python -m ds_doctor.probes.equivalence.cases --write", "designs": {'
    ]
    for number, (key, design) in enumerate(sorted(designs.items())):
        rows = [json.dumps({name: getattr(s, name) for name in s.changed()}) for s in design]
        body = ",\n  ".join(rows)
        lines.append(f'{"," if number else ""}"{key}": [\n  {body}\n ]')
    lines.append("}}")
    return "\n".join(lines) + "\n"


@functools.cache
def _coverage(
    offered: tuple[tuple[str, Sequence[object]], ...],
) -> tuple[list[Knobs], list[int], Callable[[Knobs], int]]:
    """The `offered` knobs' allowed settings, the pairs each covers (one bit per pair of two knobs' values: a set as
    an int, which the greedy step counts with bit_count), and that function; once per kind of route."""
    names = [name for name, _ in offered]
    couples = list(itertools.combinations(range(len(names)), 2))
    bits: dict[tuple[int, object, int, object], int] = {}

    def covered(knobs: Knobs) -> int:
        values = [getattr(knobs, name) for name in names]
        mask = 0
        for a, b in couples:
            mask |= 1 << bits.setdefault((a, values[a], b, values[b]), len(bits))
        return mask

    candidates = combinations(dict(offered))
    return candidates, [covered(k) for k in candidates], covered


def slice_of(design: Sequence[Knobs]) -> Knobs:
    """Level 2's setting of a route: the design's setting that turns the most knobs (the first such)."""
    return max(design, key=lambda k: len(k.changed()))


def fits(
    conditions: Iterable[str], route: str, setting: Knobs, world_size: int, step: int | None = None
) -> bool:
    """Whether `setting` on the matrix's `route` ("deepspeed-z2") at `world_size` meets every condition of a catalog
    entry's `knobs`: "name=glob|glob" on a Knobs field (a switch's value "true"/"false"), "route" or "world_size";
    "from_step=N" where the divergence starts at step `step` (1-based) N or later, the earliest the entry's bug can
    show (an epoch's boundary): a divergence before it is something else (any step fits where none is known). A
    name that is none of these fits nothing."""
    values = {"route": route, "world_size": str(world_size)}
    values |= {f.name: str(getattr(setting, f.name)).lower() for f in dataclasses.fields(Knobs)}
    for condition in conditions:
        name, _, alternatives = condition.partition("=")
        if name == "from_step":
            if step is not None and step < int(alternatives):
                return False
            continue
        if name not in values or not any(
            fnmatch.fnmatchcase(values[name], alternative.lower()) for alternative in alternatives.split("|")
        ):
            return False
    return True


def freeze_first(module: object) -> object:
    """`module` with its first layer frozen (the "frozen" knob): the parameters of the first submodule, in
    `named_modules` order, that holds parameters of its own (the MLP's first Linear; a user model's embedding)."""
    for child in module.modules():  # type: ignore[attr-defined]
        own = list(child.parameters(recurse=False))
        if own:
            for param in own:
                param.requires_grad_(False)
            break
    return module


# -- what the reference needs of a setting: groups and learning rates, as the libraries document them ----------

NO_DECAY_WORDS = ("bias", "norm")


def group_of(name: str, groups: str) -> int:
    """The group of parameter `name`: 0, or 1 for a bias or a norm's parameter where groups split ("decay",
    "rates"): the rule of transformers' `get_decay_parameter_names` (no decay for biases and normalisation layers),
    read on the name."""
    if groups == "one":
        return 0
    leaf = name.rsplit(".", 1)[-1].lower()
    return 1 if leaf == "bias" or any("norm" in part.lower() for part in name.split(".")[:-1]) else 0


def group_settings(groups: str, lr: float, weight_decay: float) -> list[dict[str, float]]:
    """Each group's own lr and weight decay (what its dict in the optimizer holds besides its parameters)."""
    if groups == "one":
        return [{"lr": lr, "weight_decay": weight_decay}]
    second = lr * SECOND_GROUP_RATE if groups == "rates" else lr
    return [{"lr": lr, "weight_decay": weight_decay}, {"lr": second, "weight_decay": 0.0}]


def split(named: Iterable[tuple[str, object]], groups: str, lr: float, weight_decay: float) -> list[dict]:
    """The optimizer's parameter groups of `named` (name, parameter) pairs: empty groups left out."""
    settings = group_settings(groups, lr, weight_decay)
    members: list[list[object]] = [[] for _ in settings]
    for name, param in named:
        members[group_of(name, groups)].append(param)
    return [{"params": m, **s} for m, s in zip(members, settings, strict=True) if m]


def linear_factor(step: int, total: int = TOTAL) -> float:
    """transformers' `get_linear_schedule_with_warmup` (a `LambdaLR`): the multiple of the base rate at scheduler
    step `step`: step / WARMUP during the warm-up, then falling linearly to 0 at `total` (the Trainer's: its
    max_steps)."""
    if step < WARMUP:
        return step / WARMUP
    return max(0.0, (total - step) / max(1, total - WARMUP))


def deepspeed_factor(step: int, kind: str = "decay") -> float:
    """DeepSpeed's schedulers (linear warm-up from 0) as their docstrings and `get_lr` define them, the multiple of
    each group's peak rate: at construction (iteration -1) 0; the engine steps them after each optimizer step, so
    optimizer step `step` runs at iteration step - 1: iteration / WARMUP during the warm-up; then `WarmupDecayLR`
    ("decay") falls as (TOTAL - iteration) / (TOTAL - WARMUP), `WarmupLR` ("warmup") stays at 1, and `WarmupCosineLR`
    ("cosine") follows a half cosine from 1 to COS_MIN over TOTAL - WARMUP iterations, the first after the warm-up
    already one along."""
    if kind == "onecycle":
        return onecycle_factor(step)
    iteration = step - 1
    if iteration < 0:
        return 0.0
    if iteration < WARMUP:
        return iteration / WARMUP
    if kind == "warmup":
        return 1.0
    if kind == "cosine":
        progress = min(1.0, (iteration - WARMUP + 1) / max(1, TOTAL - WARMUP))
        return COS_MIN + (1.0 - COS_MIN) * (1.0 + math.cos(math.pi * progress)) / 2.0
    return max(0.0, (TOTAL - iteration) / max(1.0, TOTAL - WARMUP))


def onecycle_factor(step: int) -> float:
    """DeepSpeed's `OneCycle` as its docstring defines it, in its first half-cycle (ONECYCLE_STEPS scheduler steps
    from the floor to the rate) with `cycle_first_stair_count` ONECYCLE_STAIRS: "lr/mom are changed in staircase
    fashion", each stair held flat (the floor of the position, as its LR range test's staircase does). It sets the
    floor at construction and computes the rate of batch `last_batch_iteration + 1` at each step, so optimizer step
    `step` (from 0) runs at batch `step`."""
    return ONECYCLE_MIN + (1.0 - ONECYCLE_MIN) * _onecycle_scale(step)


def _onecycle_scale(step: int) -> float:
    """How far along its first half-cycle `OneCycle` is at batch `step`, 0 to 1, held flat on each stair: what it
    moves the rate up and the momentum down by."""
    position = min(step, ONECYCLE_STEPS) * ONECYCLE_STAIRS / ONECYCLE_STEPS
    return math.floor(position) / ONECYCLE_STAIRS


def onecycle_beta1(step: int) -> float:
    """Adam's beta1 at optimizer step `step` (from 0) where DeepSpeed's `OneCycle` cycles momentum, as its docstring
    defines it: `cycle_min_mom` "Initial momentum" (set at construction, so step 0 runs at it), then "momentum is
    cycled inversely to learning rate" between `cycle_max_mom` and `cycle_min_mom`, in the rate's stairs (the
    engine's step k > 0 runs at batch k, as the rate does)."""
    if step == 0:
        return ONECYCLE_MIN_MOM
    return ONECYCLE_MAX_MOM - (ONECYCLE_MAX_MOM - ONECYCLE_MIN_MOM) * _onecycle_scale(step)


def sequential_factor(step: int) -> float:
    """torch's `SequentialLR([LinearLR(start_factor=SEQUENTIAL_START, total_iters=WARMUP), CosineAnnealingLR(T_max=
    TOTAL - WARMUP)], milestones=[WARMUP])` as its docs define it, the multiple of each group's base rate at scheduler
    step `step`: `LinearLR`'s factor, rising linearly from its start to 1 over WARMUP steps; from the milestone on
    `CosineAnnealingLR`'s closed form from its own step 0, (1 + cos(pi t / T_max)) / 2 with `eta_min` 0. A
    `SequentialLR` whose one child is this one (no milestones) runs that child's schedule unchanged."""
    if step < WARMUP:
        return SEQUENTIAL_START + (1.0 - SEQUENTIAL_START) * step / WARMUP
    return (1.0 + math.cos(math.pi * (step - WARMUP) / (TOTAL - WARMUP))) / 2.0


def resume_at(knobs: Knobs, plain: int = RESUME_AT) -> int:
    """The optimizer step a "resume" setting's checkpoint is written at: the route's `plain` one (the Trainer's
    RESUME_AT; the middle step elsewhere), or SHUFFLED_RESUME_AT in a shuffled setting, inside the second epoch."""
    return SHUFFLED_RESUME_AT if knobs.shuffle else plain


def epoch_micro_batches(accumulation: int, partial_window: bool) -> int:
    """The micro-batches of an epoch on each rank: EPOCH_STEPS windows, the last one micro-batch where the
    "partial_window" knob cuts it short."""
    return EPOCH_STEPS * accumulation - (accumulation - 1 if partial_window else 0)


def epoch_window(step: int, accumulation: int, partial_window: bool) -> int:
    """The micro-batches of optimizer step `step` on each rank where the stream runs in epochs of EPOCH_STEPS
    steps: the window, or one in an epoch's last step under "partial_window"."""
    last = step % EPOCH_STEPS == EPOCH_STEPS - 1
    return 1 if partial_window and last else accumulation


def sequential_order(
    step: int,
    micro: int,
    rank: int,
    micro_batch: int,
    accumulation: int,
    world_size: int,
    partial_window: bool,
) -> range:
    """The sample indices of micro-batch `micro` of optimizer step `step` on `rank` from a sequential DataLoader
    whose batches go to the processes in turn (`BatchSamplerShard`, batches not split): one endless stream, or
    under "partial_window" epochs of EPOCH_STEPS steps over the same samples, the last window one micro-batch."""
    if partial_window:
        step %= EPOCH_STEPS
    b = (step * accumulation + micro) * world_size + rank
    return range(b * micro_batch, (b + 1) * micro_batch)


def documented_order(
    step: int,
    micro: int,
    rank: int,
    micro_batch: int,
    accumulation: int,
    world_size: int,
    seed: int = SHUFFLE_SEED,
    partial_window: bool = False,
) -> list[int]:
    """The sample indices of micro-batch `micro` of optimizer step `step` on `rank` under the "shuffle" knob, as
    Accelerate documents its seedable sampler and sharding: each epoch one permutation of the epoch's samples drawn
    from a generator seeded with the job's seed plus the epoch (`SeedableRandomSampler`), cut into micro-batches,
    handed to the processes in turn (`BatchSamplerShard`, batches not split). Batches of the global micro-batch split
    between the processes (the "split" knob: each process its slice, in process order) deal the same samples to the
    same rank, so one order serves both. `seed`: the job's, or the Trainer's `data_seed`, which it hands to
    Accelerate's sampler as its initial seed; `partial_window`: an epoch one micro-batch per rank into its last
    window."""
    import torch

    epoch, within = divmod(step, EPOCH_STEPS)
    samples = epoch_micro_batches(accumulation, partial_window) * micro_batch * world_size
    order = torch.randperm(samples, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    # the permutation dealt as a sequential loader's batches are (`within` is already inside the epoch)
    return [
        order[i] for i in sequential_order(within, micro, rank, micro_batch, accumulation, world_size, False)
    ]

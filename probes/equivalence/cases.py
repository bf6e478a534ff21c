"""The equivalence family's cases: each a `Route` (what wraps the model, how the user's loop trains it, and what a
reproducing case shows), the known issues they reproduce, and the variants a run expands them to (the user's
DeepSpeed and Accelerate configs add one each)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from typing import TYPE_CHECKING, Any

from ds_doctor.plugins import RankOptions, Variant, Wrapper
from ds_doctor.plugins.usersetup import UserConfig

if TYPE_CHECKING:
    from ds_doctor.probes.equivalence.knobs import Knobs


@dataclasses.dataclass(frozen=True)
class Route:
    """How the user's code wraps and trains the model (the knobs a session turns)."""

    name: str
    wrapper: Wrapper  # what wraps the model (`routes.SESSIONS` has the torch ones' sessions)
    what: str  # in words, for the report
    stage: int = 0  # DeepSpeed's ZeRO stage
    offload: bool = False  # ZeRO's offload_optimizer to the CPU
    # FSDP1 clipped with torch.nn.utils.clip_grad_norm_: each rank's shard norm (planted)
    local_clip: bool = False
    resume: Wrapper | None = None  # the save/load path of a resume case: the wrapper's own
    drop: tuple[str, ...] = ()  # what the resume leaves out of the load: "optimizer", "scheduler" (planted)
    loss_kwargs: bool = True  # the Trainer's model takes **kwargs (num_items_in_batch)
    # each row's first label -100 (never predicted): the Trainer's unshifted num_items_in_batch then counts right
    first_label_masked: bool = False
    # the stream ends one micro-batch into the last accumulation window (an epoch whose length is not a multiple
    # of the window): that step is the token mean of the one micro-batch per rank it has
    partial_window: bool = False
    label_smoothing: float = 0.0  # the Trainer's label_smoothing_factor (its LabelSmoother computes the loss)
    accumulation: int = 2  # the DeepSpeed routes' gradient_accumulation_steps
    bf16: bool = (
        False  # the DeepSpeed routes' bf16 block, the model trained in bf16 (a torch AdamW passed in)
    )
    # Accelerate's GradientAccumulationPlugin(sync_each_batch=True): gradients all-reduced at every micro-batch
    sync_each_batch: bool = False
    level: int = 3
    reproduce: bool = False
    issue: str | None = None
    user: UserConfig | None = None  # the DeepSpeed route on the user's --deepspeed-config
    user_accelerate: bool = False  # the Accelerate route on the user's --accelerate-config
    # a model spec of the route's own, as --model spells it (the tests' planted models)
    model: str | None = None
    knobs: Knobs | None = (
        None  # a setting of the knob matrix (`knobs`): it decides what the fields above decide
    )


#: transformers >= 4.46.2 counts num_items_in_batch on the labels as given; a causal LM's loss shifts them
OVERCOUNT_ISSUE = "hf_trainer_num_items_unshifted_overcount"
#: transformers 4.46-5.14.1's LabelSmoother ignores num_items_in_batch: each micro-batch's own mean, never divided
LABEL_SMOOTHING_ISSUE = "hf_trainer_label_smoothing_ignores_num_items"
#: transformers 5.2.0-5.5.3 also hands the accumulation steps to Accelerate, whose backward divides again
DOUBLE_DIVISION_ISSUE = "hf_trainer_accelerate_double_ga_division"
#: transformers 4.47.0 and 4.48.0 give a **kwargs model no num_items_in_batch and never divide: the loss times the
#: accumulation steps
NOT_DIVIDED_ISSUE = "hf_trainer_kwargs_models_loss_not_divided"
#: a head whose forward takes **kwargs but whose loss drops num_items_in_batch (transformers #47688)
HEAD_DROPS_ISSUE = "hf_trainer_head_drops_num_items"
GA_ISSUE = "hf_trainer_ga_loss_per_microbatch"
NO_KWARGS_ISSUE = "hf_trainer_ga_no_loss_kwargs"
OFFLOAD_ACCUMULATION_ISSUE = "ds_offload_accumulation_keeps_first_microbatch"
SYNC_EACH_BATCH_ISSUE = "acc_sync_each_batch_steps_every_microbatch"
Z0_BF16_ISSUE = "ds_z0_bf16_grads_unscaled_and_kept"
_DS = "deepspeed.initialize with the config's AdamW, engine.backward + engine.step per micro-batch"
ROUTES = (
    Route(
        "ddp",
        Wrapper.DDP,
        "DistributedDataParallel, no_sync on every micro-batch but the last, torch clip_grad_norm_, "
        "torch AdamW",
        level=2,
    ),
    Route("fsdp1", Wrapper.FSDP1, "FSDP1 (a unit per Linear), no_sync, FSDP.clip_grad_norm_, torch AdamW"),
    Route(
        "fsdp2",
        Wrapper.FSDP2,
        "FSDP2 fully_shard (each Linear and the root), set_requires_gradient_sync, clip_grad_norm_ "
        "on DTensors, torch AdamW",
        level=2,
    ),
    *(
        Route(
            f"deepspeed-z{stage}",
            Wrapper.DEEPSPEED,
            f"{_DS}, ZeRO stage {stage}",
            stage=stage,
            level=2 if stage in (2, 3) else 3,
        )
        for stage in (0, 1, 2, 3)
    ),
    *(
        Route(
            f"deepspeed-z{stage}-offload",
            Wrapper.DEEPSPEED,
            f"{_DS}, ZeRO stage {stage}, optimizer offloaded to the CPU",
            stage=stage,
            offload=True,
        )
        for stage in (1, 2, 3)
    ),
    Route(
        "deepspeed-z2-offload-ga4",
        Wrapper.DEEPSPEED,
        f"{_DS}, ZeRO stage 2, optimizer offloaded to the CPU, gradient_accumulation_steps 4, as a reproducing case "
        "of the offloaded accumulation that keeps micro-batch 0's gradient (xfail on DeepSpeed 0.15.2-0.18.9: "
        "micro-batches 1 to accumulation-2 are lost)",
        stage=2,
        offload=True,
        accumulation=4,
        reproduce=True,
        issue=OFFLOAD_ACCUMULATION_ISSUE,
    ),
    Route(
        "accelerate",
        Wrapper.ACCELERATE,
        "Accelerator(gradient_accumulation_steps) with accumulate, backward, "
        "clip_grad_norm_, the prepared torch AdamW",
    ),
    Route(
        "deepspeed-z0-bf16",
        Wrapper.DEEPSPEED,
        "deepspeed.initialize with a torch AdamW passed in, no ZeRO, bf16 enabled, engine.backward + engine.step per "
        "micro-batch, as a reproducing case of bf16 without ZeRO (xfail on DeepSpeed 0.17.6-0.18.5: the gradients "
        "divided by an fp16 loss scale never applied, and never zeroed between steps)",
        stage=0,
        bf16=True,
        reproduce=True,
        issue=Z0_BF16_ISSUE,
    ),
    Route(
        "accelerate-sync-each-batch",
        Wrapper.ACCELERATE,
        "Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps, sync_each_batch=True)) with "
        "accumulate, backward, clip_grad_norm_, the prepared torch AdamW, as a reproducing case of the flag that "
        "turned accumulation off (xfail on Accelerate 0.28.0-0.30.1: the optimizer steps at every micro-batch)",
        sync_each_batch=True,
        reproduce=True,
        issue=SYNC_EACH_BATCH_ISSUE,
    ),
    Route(
        "accelerate-deepspeed",
        Wrapper.ACCELERATE_DEEPSPEED,
        "Accelerator(DeepSpeedPlugin(config)) ZeRO 2 with "
        "accumulate and backward, the config's accumulation and clipping, a prepared torch AdamW",
        stage=2,
    ),
    Route(
        "trainer",
        Wrapper.TRAINER,
        "transformers Trainer (DDP), a tiny Llama on right-padded sequences, "
        "max_grad_norm, adamw_torch; reference: the global batch's token-mean loss",
        issue=GA_ISSUE,
    ),
    Route(
        "trainer-ga-per-token",
        Wrapper.TRAINER,
        "the trainer route as a reproducing case of the per-micro-batch "
        "normalisation (xfail on transformers < 4.46, xpass after: make verify-catalog measures it with --with)",
        reproduce=True,
        issue=GA_ISSUE,
    ),
    Route(
        "trainer-no-loss-kwargs",
        Wrapper.TRAINER,
        "transformers Trainer, the same Llama inside a module whose forward "
        "takes no **kwargs (num_items_in_batch cannot reach it)",
        loss_kwargs=False,
        reproduce=True,
        issue=NO_KWARGS_ISSUE,
    ),
    Route(
        "trainer-num-items",
        Wrapper.TRAINER,
        "transformers Trainer on a tiny GPT-2, whose config names no loss_type: "
        "num_items_in_batch counted on the labels as given while the loss shifts them",
        reproduce=True,
        issue=OVERCOUNT_ISSUE,
        model="hf:gpt2",
    ),
    Route(
        "trainer-ga-double-division",
        Wrapper.TRAINER,
        "the trainer route with each row's first label -100 (the overcount's remedy), as a reproducing case of the "
        "accumulation steps handed to Accelerate too (xfail on transformers 5.2.0-5.5.3: the loss divided twice)",
        reproduce=True,
        issue=DOUBLE_DIVISION_ISSUE,
        first_label_masked=True,
    ),
    Route(
        "trainer-partial-window",
        Wrapper.TRAINER,
        "the trainer route on a stream that ends one micro-batch into the last accumulation window (an epoch whose "
        "length is not a multiple of the window, ms-swift PR #10084's class; first labels -100): that step is the "
        "token mean of the micro-batch each rank has",
        first_label_masked=True,
        partial_window=True,
    ),
    Route(
        "trainer-label-smoothing",
        Wrapper.TRAINER,
        "the trainer route with label_smoothing_factor 0.1 (the Trainer's LabelSmoother computes the loss; first "
        "labels -100), as a reproducing case of the smoother that ignores num_items_in_batch (xfail on transformers "
        "4.46-5.14.1: each micro-batch's own mean, never divided by the accumulation steps)",
        reproduce=True,
        issue=LABEL_SMOOTHING_ISSUE,
        first_label_masked=True,
        label_smoothing=0.1,
    ),
    Route(
        "resume-deepspeed",
        Wrapper.DEEPSPEED,
        f"{_DS}, ZeRO 2, WarmupDecayLR; save_checkpoint at step 2, load_checkpoint in a new process",
        stage=2,
        resume=Wrapper.DEEPSPEED,
    ),
    Route(
        "resume-accelerate",
        Wrapper.ACCELERATE,
        "Accelerator with a prepared LambdaLR warm-up; save_state at step 2, load_state in a new process",
        resume=Wrapper.ACCELERATE,
    ),
    Route(
        "resume-trainer",
        Wrapper.TRAINER,
        "transformers Trainer with a linear warm-up; checkpoint at step 2, "
        "train(resume_from_checkpoint=...) in a new process",
        resume=Wrapper.TRAINER,
    ),
)


def variants(options: RankOptions) -> list[Variant]:
    routes = list(ROUTES)
    user = options.user_deepspeed_config()
    if user is not None:
        routes.append(
            Route(
                "deepspeed-user-config",
                Wrapper.DEEPSPEED,
                f"{_DS}, your DeepSpeed config",
                user=user,
                level=2,
            )
        )
    if options.accelerate_config is not None:
        routes.append(
            Route(
                "accelerate-user-config",
                Wrapper.ACCELERATE,
                "your Accelerate config's Accelerator, the documented accumulate / backward / clip loop",
                user_accelerate=True,
                level=2,
            )
        )
    return [Variant(r.name, r, level=r.level, reproduce=r.reproduce) for r in routes + matrix(options.matrix)]


#: the routes the knob matrix drives, each with the knobs its library offers (`knobs.offered`'s groups)
MATRIX_ROUTES = (
    ("ddp", Wrapper.DDP, 0, "torch"),
    ("fsdp1", Wrapper.FSDP1, 0, "torch"),
    ("fsdp2", Wrapper.FSDP2, 0, "torch"),
    ("deepspeed-z0", Wrapper.DEEPSPEED, 0, "deepspeed"),
    ("deepspeed-z1", Wrapper.DEEPSPEED, 1, "zero"),
    ("deepspeed-z2", Wrapper.DEEPSPEED, 2, "zero"),
    ("deepspeed-z3", Wrapper.DEEPSPEED, 3, "zero3"),
    ("accelerate", Wrapper.ACCELERATE, 0, "accelerate"),
    ("accelerate-deepspeed", Wrapper.ACCELERATE_DEEPSPEED, 2, "accelerate-deepspeed"),
    ("trainer", Wrapper.TRAINER, 0, "trainer"),
    # the Trainer with a DeepSpeed config of "auto" values (ZeRO-2), its own optimizer and schedule passed in
    ("trainer-deepspeed", Wrapper.TRAINER, 2, "trainer"),
)
#: level 2's slice: the routes whose most-turned setting runs there
SLICED = ("ddp", "deepspeed-z2", "deepspeed-z3", "accelerate")


def needed() -> dict[str, list[Knobs]]:
    """The settings real bugs needed, added to the pairs by hand (docs/invariants.md, "The knob matrix")."""
    from ds_doctor.probes.equivalence.knobs import Knobs

    return {
        # DeepSpeed PR #7967: ZeRO-2 offload keeps micro-batch 0 of a window of 3 or more
        "deepspeed-z2": [Knobs(accumulation=4, offload=True)],
        # DeepSpeed PR #7050: ZeRO-3's reload_states maps shards in module order onto a buffer in group order (two
        # groups whose order is not the module's: decay, then no decay)
        "deepspeed-z3": [Knobs(groups="decay", offload_states=True)],
        # DeepSpeed #7837: bf16 without ZeRO and a client optimizer
        "deepspeed-z0": [Knobs(precision="bf16", source="client")],
        # Accelerate PR #2790: sync_each_batch stepped the optimizer at every micro-batch; PR #1140: a torch 2
        # scheduler not prepared (releases <= 0.16 run no bf16 on a CPU and have no sync_each_batch: the pairs'
        # other warm-up settings turn one of them)
        # Accelerate PR #2584 (the seedable sampler unused across processes): the shuffle knob alone, its seedable
        # sampler on every rank (rank_seeds turns it off)
        "accelerate": [
            Knobs(sync_each_batch=True),
            Knobs(groups="decay", schedule="warmup"),
            Knobs(accumulation=1, shuffle=True),
            # Accelerate PR #3246 (the fresh sample's #8): `set_epoch` never reaches the job's own batch sampler, so
            # every epoch replays epoch 0 (at one process before 1.2.0; at two, where BatchSamplerShard wraps it,
            # in 1.15.0 too)
            Knobs(accumulation=1, shuffle=True, batch_sampler=True),
        ],
    }


def beside() -> dict[str, list[tuple[Knobs, dict[str, Any]]]]:
    """Settings real bugs needed that no pair may hold, run after a route's design, each with the route fields it
    sets besides its knobs: they take no part in the design's coverage, so the design (whose settings the measured
    records name) stays as it was."""
    from ds_doctor.probes.equivalence.knobs import Knobs

    settings: dict[str, list[tuple[Knobs, dict[str, Any]]]] = {
        # Accelerate PR #3556 (transformers >= 5 with Accelerate 1.3.0-1.6.0) and transformers #40690 (<= 4.57.6 with
        # Accelerate 1.7.0-1.14.0): a resume inside the second epoch of a shuffled sampler draws epoch 0's order.
        # Each row's first label -100 (the overcount's remedy: a causal LM never predicts it, so the loss is the
        # same): on 4.46-4.57 every other Trainer setting fails on the overcount at step 1, which would hide it
        "trainer": [
            (Knobs(shuffle=True, resume=True), {"first_label_masked": True}),
            # transformers PR #33673 (4.27.0-4.46.3): the accumulation window counted across epochs, so an epoch's
            # short last window is closed only with the next epoch's first micro-batch. The design's partial-window
            # settings show it on 4.46.0-4.46.1; on 4.46.2-4.46.3 the overcount fits them first at step 1, so here
            # each row's first label is masked too (the overcount's remedy) and only the counter is left. Under
            # `--matrix full` the design holds these knobs, and its own setting (labels as given) runs in its place
            (Knobs(partial_window=True), {"first_label_masked": True}),
        ],
        # accelerate PR #4071 (1.7.0-1.14.0): the loop's set_epoch, then skip_first_batches, whose fresh loader
        # starts its epoch count at 0 again; the job's own resume through save_state / load_state
        "accelerate": [
            (Knobs(accumulation=1, shuffle=True, resume=True), {}),
            # accelerate issue #3996 (open): the loop without set_epoch, as Accelerate's checkpointing guide writes
            # it; save_state keeps no DataLoader's epoch, so the resumed loader starts at epoch 0
            (Knobs(accumulation=1, shuffle=True, resume=True, no_set_epoch=True), {}),
            # an epoch whose micro-batches are not a multiple of the window: accumulate() syncs at the DataLoader's
            # end (the Trainer's partial window, met in a user's own loop)
            (Knobs(partial_window=True), {}),
            # batches split between the processes as Accelerate documents it (a warm-up: the prepared scheduler steps
            # once per optimizer step, not once per process), and as older scripts ask it: accelerate issue #3177
            # (the ninth search's #4, open at 1.15.0), `Accelerator(split_batches=True)` accepted and never read
            # since 1.0.0, so each process trains the whole batch and an epoch takes half the steps at two
            (Knobs(accumulation=1, schedule="warmup", shuffle=True, split="config"), {}),
            (Knobs(accumulation=1, shuffle=True, split="keyword"), {}),
        ],
        # Accelerate issue #3552, PR #3630 (< 1.8.0): the engine never told where that short window ends
        "accelerate-deepspeed": [(Knobs(partial_window=True), {})],
        # torch issue #154888 (open at 2.14.1): HYBRID_SHARD whose shard groups hold one rank falls back to
        # NO_SHARD over that group, and the replicas never all-reduce
        "fsdp1": [(Knobs(hybrid=True), {})],
        # torch issue #164929 (open at 2.14.1): DCP's get_state_dict on an optimizer with no state runs a step at
        # lr 0 to make one, so Adam's first real step is its second
        "fsdp2": [(Knobs(state_dict_first=True), {})],
    }
    # a frozen first layer on every route, before any bug of it was read: its parameters must sit out of every group
    # and leave each step as they were (the Trainer's: its LM's embedding); offloaded where the route offloads, and
    # ZeRO-2/3 in bf16 with a window of 4, where a stage keeps its own gradient buffers
    frozen = {name: [Knobs(frozen=True)] for name, *_ in MATRIX_ROUTES}
    for name in ("deepspeed-z1", "deepspeed-z2", "deepspeed-z3", "accelerate-deepspeed"):
        frozen[name].append(Knobs(frozen=True, offload=True))
    for name in ("deepspeed-z2", "deepspeed-z3"):
        frozen[name].append(Knobs(frozen=True, precision="bf16", accumulation=4))
    for name, extra in frozen.items():
        settings.setdefault(name, []).extend((setting, {}) for setting in extra)
    # DeepSpeed's OneCycle at its default cycle_momentum (the design's "onecycle" turns it off), config and client
    # optimizer: the seventh search's #8 (DeepSpeed PR #8495, open at 0.19.8: it writes beta2 0.99 into every group)
    for name in ("deepspeed-z0", "deepspeed-z1", "deepspeed-z2", "deepspeed-z3"):
        settings[name].append((Knobs(schedule="onecycle", cycle_momentum=True), {}))
    settings["deepspeed-z0"].append((Knobs(schedule="onecycle", cycle_momentum=True, source="client"), {}))
    # torch's SequentialLR (a LinearLR warm-up, then a CosineAnnealingLR), and the same inside another, as a framework
    # wraps a user's scheduler: torch issue #196243 (open at 2.14.1, the seventh search's #1) steps the inner one
    # ahead while the outer is built. Where a torch scheduler is the user's: the torch routes, Accelerate's prepared
    # one (stepped once per process), a client's passed to DeepSpeed
    for name in ("ddp", "accelerate"):
        settings[name].append((Knobs(schedule="sequential"), {}))
    for name in ("ddp", "fsdp1", "fsdp2", "accelerate"):
        settings[name].append((Knobs(schedule="nested"), {}))
    settings["deepspeed-z2"].append((Knobs(schedule="nested", source="client"), {}))
    # a sequence-classification head under the Trainer (the eighth search's #3: transformers issue #47688, open at
    # 5.24.0): its forward takes **kwargs, so the Trainer takes it for a model that divides by num_items_in_batch and
    # neither divides its mean by the accumulation steps nor leaves the ranks unmultiplied
    settings["trainer"].append((Knobs(head="classify", accumulation=4), {}))
    settings["trainer-deepspeed"].append((Knobs(head="classify"), {}))
    return settings


def matrix(extent: str = "pairs") -> list[Route]:
    """The knob matrix's cases (a fresh list of the settings `_matrix` designed once per process)."""
    return list(_matrix(extent))


@functools.cache
def _matrix(extent: str) -> tuple[Route, ...]:
    """The knob matrix's cases: per route, its covering design (`knobs.pairs`, level 3; `--matrix full`: every
    combination) and, at level 2, the slice (`knobs.slice_of`). Named `matrix-<route>-<the knobs turned>`."""
    from ds_doctor.probes.equivalence import knobs as k

    out = []
    for (name, wrapper, stage, _), (_, offered, need) in zip(MATRIX_ROUTES, design_requests(), strict=True):
        design = k.pairs(offered, need)
        level2 = k.slice_of(design) if name in SLICED else None
        if extent == "full":
            design += [c for c in k.combinations(offered) if c not in design]
        own = any(r.name == name for r in ROUTES)  # then the defaults are the route's own case
        settings: list[tuple[Knobs, dict[str, Any]]] = [(s, {}) for s in (design[1:] if own else design)]
        settings += [(setting, fields) for setting, fields in beside().get(name, ()) if setting not in design]
        for setting, fields in settings:
            base = Route(
                "-".join(["matrix", name, *setting.tokens()]),
                wrapper,
                f"the {name} route with {setting.describe()} (the knob matrix)",
                stage=stage,
                level=2 if setting == level2 else 3,
            )
            out.append(with_knobs(dataclasses.replace(base, **fields), setting))
    return tuple(out)


def design_requests() -> list[tuple[str, dict[str, tuple[object, ...]], tuple[Knobs, ...]]]:
    """Per matrix route: its name, the knobs its kind offers, and the settings real bugs needed on it (what its
    covering design is drawn from: `knobs.pairs`)."""
    from ds_doctor.probes.equivalence import knobs as k

    offered = {
        "torch": k.TORCH_KNOBS,
        "deepspeed": k.DEEPSPEED_KNOBS,
        "zero": k.ZERO_KNOBS,
        "zero3": k.ZERO3_KNOBS,
    }
    offered |= {"accelerate": k.ACCELERATE_KNOBS, "trainer": k.TRAINER_KNOBS}
    offered |= {"accelerate-deepspeed": k.ACCELERATE_DEEPSPEED_KNOBS}
    return [(name, offered[kind], tuple(needed().get(name, ()))) for name, _, _, kind in MATRIX_ROUTES]


def matrix_route(route: Route) -> str:
    """The matrix route a setting's case runs on ("deepspeed-z2" of "matrix-deepspeed-z2-ga4-offload")."""
    rest = route.name.removeprefix("matrix-")
    names = sorted((name for name, *_ in MATRIX_ROUTES), key=len, reverse=True)
    return next(name for name in names if rest == name or rest.startswith(f"{name}-"))


def with_knobs(route: Route, setting: Knobs) -> Route:
    """`route` at the matrix's `setting`: the fields the knobs decide, set from them."""
    return dataclasses.replace(
        route,
        offload=setting.offload,
        accumulation=setting.accumulation,
        bf16=setting.precision == "bf16",
        sync_each_batch=setting.sync_each_batch,
        label_smoothing=0.1 if setting.smoothing else 0.0,
        knobs=setting,
    )


def main(argv: list[str] | None = None) -> int:
    from ds_doctor.probes.equivalence import knobs as k

    parser = argparse.ArgumentParser(
        prog="python -m ds_doctor.probes.equivalence.cases",
        description="The knob matrix's designs (knobs.DESIGNS): print, --write or --check them.",
    )
    parser.add_argument("--write", action="store_true", help=f"write {k.DESIGNS.name}")
    parser.add_argument(
        "--check", action="store_true", help=f"exit 1 where {k.DESIGNS.name} is not what draw gives"
    )
    args = parser.parse_args(argv)
    text = k.render({k.fingerprint(o, n): k.draw(o, n) for _, o, n in design_requests()})
    if args.write:
        k.DESIGNS.write_text(text, encoding="utf-8")
    if args.check and (not k.DESIGNS.exists() or k.DESIGNS.read_text(encoding="utf-8") != text):
        print(f"{k.DESIGNS} is not what the knobs give: python -m ds_doctor.probes.equivalence.cases --write")
        return 1
    if not (args.write or args.check):
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""equivalence: the wrapped training computes what plain torch computes.

One tiny model (the probes' MLP, or the user's `--model`), one deterministic data stream and one seed. Each case
trains through one route (DDP, FSDP1, FSDP2, DeepSpeed ZeRO 0-3 with and without optimizer offload, Accelerate
with and without DeepSpeed, the HF Trainer) for a few optimizer steps with gradient accumulation and a clipping
threshold that engages, then replays the same global batches in a single-process fp32 reference on the rank itself
(`ds_doctor.probes.equivalence.subject`). Per step the loss, the global gradient norm before clipping and
every parameter
(gathered) are held to a tolerance that follows from the dtype and the number of steps (docs/invariants.md); the
first step, stage and parameter that leave it are the finding, with the route's settings. Resume cases save at
step k, load in a new process and go on (`ds_doctor.probes.equivalence.resume`): what the load did not restore is named.
"""

from __future__ import annotations

from ds_doctor.plugins import ModelNote, ProbeContext, ProbeSpec, RankOptions, Requirement, Variant
from ds_doctor.probes.equivalence import resume as equivalence_resume
from ds_doctor.probes.equivalence import trainer as equivalence_trainer
from ds_doctor.probes.equivalence.reference import prestart as prestart_reference
from ds_doctor.probes.equivalence.routes import Route
from ds_doctor.probes.equivalence.sessions import Judging, follows_schedule, judge, open_session
from ds_doctor.probes.equivalence.subject import current_subject
from ds_doctor.probes.shared.common import accelerate_session

SPEC = ProbeSpec(
    name="equivalence",
    scenario="smoke",
    description="DDP/FSDP/DeepSpeed/Accelerate/Trainer: per-step loss, grad norm and parameters against plain torch; "
    "resume restores everything",
    world_sizes=(1, 2),
    requires=(Requirement("torch", "torch"),),
    timeout_s=240.0,
    deepspeed_ops=True,  # its DeepSpeed routes
)

GA_ISSUE = "hf_trainer_ga_loss_per_microbatch"
NO_KWARGS_ISSUE = "hf_trainer_ga_no_loss_kwargs"
OFFLOAD_ACCUMULATION_ISSUE = "ds_offload_accumulation_keeps_first_microbatch"
SYNC_EACH_BATCH_ISSUE = "acc_sync_each_batch_steps_every_microbatch"
Z0_BF16_ISSUE = "ds_z0_bf16_grads_unscaled_and_kept"
_DS = "deepspeed.initialize with the config's AdamW, engine.backward + engine.step per micro-batch"
ROUTES = (
    Route(
        "ddp",
        "ddp",
        "DistributedDataParallel, no_sync on every micro-batch but the last, torch clip_grad_norm_, "
        "torch AdamW",
        level=2,
    ),
    Route("fsdp1", "fsdp1", "FSDP1 (a unit per Linear), no_sync, FSDP.clip_grad_norm_, torch AdamW"),
    Route(
        "fsdp2",
        "fsdp2",
        "FSDP2 fully_shard (each Linear and the root), set_requires_gradient_sync, clip_grad_norm_ "
        "on DTensors, torch AdamW",
        level=2,
    ),
    *(
        Route(
            f"deepspeed-z{stage}",
            "deepspeed",
            f"{_DS}, ZeRO stage {stage}",
            stage=stage,
            level=2 if stage in (2, 3) else 3,
        )
        for stage in (0, 1, 2, 3)
    ),
    *(
        Route(
            f"deepspeed-z{stage}-offload",
            "deepspeed",
            f"{_DS}, ZeRO stage {stage}, optimizer offloaded to the CPU",
            stage=stage,
            offload=True,
        )
        for stage in (1, 2, 3)
    ),
    Route(
        "deepspeed-z2-offload-ga4",
        "deepspeed",
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
        "accelerate",
        "Accelerator(gradient_accumulation_steps) with accumulate, backward, "
        "clip_grad_norm_, the prepared torch AdamW",
    ),
    Route(
        "deepspeed-z0-bf16",
        "deepspeed",
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
        "accelerate",
        "Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps, sync_each_batch=True)) with "
        "accumulate, backward, clip_grad_norm_, the prepared torch AdamW, as a reproducing case of the flag that "
        "turned accumulation off (xfail on Accelerate 0.28.0-0.30.1: the optimizer steps at every micro-batch)",
        sync_each_batch=True,
        reproduce=True,
        issue=SYNC_EACH_BATCH_ISSUE,
    ),
    Route(
        "accelerate-deepspeed",
        "accelerate-deepspeed",
        "Accelerator(DeepSpeedPlugin(config)) ZeRO 2 with "
        "accumulate and backward, the config's accumulation and clipping, a prepared torch AdamW",
        stage=2,
    ),
    Route(
        "trainer",
        "trainer",
        "transformers Trainer (DDP), a tiny Llama on right-padded sequences, "
        "max_grad_norm, adamw_torch; reference: the global batch's token-mean loss",
        issue=GA_ISSUE,
    ),
    Route(
        "trainer-ga-per-token",
        "trainer",
        "the trainer route as a reproducing case of the per-micro-batch "
        "normalisation (xfail on transformers < 4.46, xpass after: make verify-catalog measures it with --with)",
        reproduce=True,
        issue=GA_ISSUE,
    ),
    Route(
        "trainer-no-loss-kwargs",
        "trainer",
        "transformers Trainer, the same Llama inside a module whose forward "
        "takes no **kwargs (num_items_in_batch cannot reach it)",
        loss_kwargs=False,
        reproduce=True,
        issue=NO_KWARGS_ISSUE,
    ),
    Route(
        "trainer-num-items",
        "trainer",
        "transformers Trainer on a tiny GPT-2, whose config names no loss_type: "
        "num_items_in_batch counted on the labels as given while the loss shifts them",
        reproduce=True,
        issue=equivalence_trainer.OVERCOUNT_ISSUE,
        model="hf:gpt2",
    ),
    Route(
        "trainer-ga-double-division",
        "trainer",
        "the trainer route with each row's first label -100 (the overcount's remedy), as a reproducing case of the "
        "accumulation steps handed to Accelerate too (xfail on transformers 5.2.0-5.5.3: the loss divided twice)",
        reproduce=True,
        issue=equivalence_trainer.DOUBLE_DIVISION_ISSUE,
        first_label_masked=True,
    ),
    Route(
        "trainer-partial-window",
        "trainer",
        "the trainer route on a stream that ends one micro-batch into the last accumulation window (an epoch whose "
        "length is not a multiple of the window, ms-swift PR #10084's class; first labels -100): that step is the "
        "token mean of the micro-batch each rank has",
        first_label_masked=True,
        partial_window=True,
    ),
    Route(
        "trainer-label-smoothing",
        "trainer",
        "the trainer route with label_smoothing_factor 0.1 (the Trainer's LabelSmoother computes the loss; first "
        "labels -100), as a reproducing case of the smoother that ignores num_items_in_batch (xfail on transformers "
        "4.46-5.14.1: each micro-batch's own mean, never divided by the accumulation steps)",
        reproduce=True,
        issue=equivalence_trainer.LABEL_SMOOTHING_ISSUE,
        first_label_masked=True,
        label_smoothing=0.1,
    ),
    Route(
        "resume-deepspeed",
        "deepspeed",
        f"{_DS}, ZeRO 2, WarmupDecayLR; save_checkpoint at step 2, load_checkpoint in a new process",
        stage=2,
        resume="deepspeed",
    ),
    Route(
        "resume-accelerate",
        "accelerate",
        "Accelerator with a prepared LambdaLR warm-up; save_state at step 2, load_state in a new process",
        resume="accelerate",
    ),
    Route(
        "resume-trainer",
        "trainer",
        "transformers Trainer with a linear warm-up; checkpoint at step 2, "
        "train(resume_from_checkpoint=...) in a new process",
        resume="trainer",
    ),
)


def variants(options: RankOptions) -> list[Variant]:
    routes = list(ROUTES)
    user = options.user_deepspeed_config()
    if user is not None:
        routes.append(
            Route("deepspeed-user-config", "deepspeed", f"{_DS}, your DeepSpeed config", user=user, level=2)
        )
    if options.accelerate_config is not None:
        routes.append(
            Route(
                "accelerate-user-config",
                "accelerate",
                "your Accelerate config's Accelerator, the documented accumulate / backward / clip loop",
                user_accelerate=True,
                level=2,
            )
        )
    return [Variant(r.name, r, level=r.level, reproduce=r.reproduce) for r in routes]


def prepare(rank: int) -> None:
    """At the launch's start, before the process group: rank 0's reference process, forked from the rank where it
    can be (`reference.can_fork`). What both would import anyway is imported first, so the child shares it: torch,
    and torch's compiler, which the first `torch.optim` optimizer of a process imports (`Optimizer.__init__` is
    wrapped by `torch._compile`): 1.2 s of the reference's first answer on 2 cores, measured, and the rank's own
    first optimizer imports it too."""
    if rank != 0:
        return
    import torch._dynamo  # noqa: F401

    prestart_reference(rank)


def setup(ctx: ProbeContext) -> None:
    """The reference's process started beside the first route. DeepSpeed's ops were built before the launch (the
    run's build phase): a DeepSpeed route loads them when it needs them (3 s each on 2 cores, measured), so a launch of
    FSDP and DDP cases loads none."""
    prestart_reference(ctx.rank)  # torch imported there while the first route trains


def run(ctx: ProbeContext) -> None:
    route: Route = ctx.params
    ctx.note("route", route.what, shown=True)
    if route.wrapper == "trainer":
        equivalence_trainer.run(ctx, route)
        return
    subject = current_subject(ctx.options, route.model)
    ctx.note(ModelNote.NOTE, subject.spec)
    with accelerate_session():
        opened = open_session(ctx, route, subject)
        if route.resume:
            equivalence_resume.run(ctx, route, subject, opened)
            return
        try:
            records = [opened.step(s) for s in range(opened.hyper.steps)]
        finally:
            opened.close()
    judge(
        ctx,
        route,
        subject,
        opened.hyper,
        records,
        Judging(schedule=follows_schedule(route), outputs=opened.outputs, grads=opened.grads),
    )

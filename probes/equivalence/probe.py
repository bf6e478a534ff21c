"""equivalence: the wrapped training computes what plain torch computes.

One tiny model (the probes' MLP, or the user's `--model`), one deterministic data stream and one seed. Each case
trains through one route (DDP, FSDP1, FSDP2, DeepSpeed ZeRO 0-3 with and without optimizer offload, Accelerate
with and without DeepSpeed, the HF Trainer) for a few optimizer steps with gradient accumulation and a clipping
threshold that engages, then replays the same global batches in a single-process fp32 reference on the rank itself
(`ds_doctor.probes.equivalence.subject`). Per step the loss, the global gradient norm before clipping and
every parameter (gathered) are held to a tolerance that follows from the dtype and the number of steps
(docs/invariants.md, `ds_doctor.probes.equivalence.invariants`); the first step, stage and parameter that leave it are
the finding, with the route's settings. Resume cases save at step k, load in a new process and go on
(`ds_doctor.probes.equivalence.resume`): what the load did not restore is named. The routes each case takes are
`ds_doctor.probes.equivalence.cases`.
"""

from __future__ import annotations

import dataclasses

from ds_doctor.plugins import Finding, ModelNote, ProbeContext, ProbeSpec, Wrapper
from ds_doctor.plugins.checks import not_restored
from ds_doctor.plugins.requirements import TORCH
from ds_doctor.probes.equivalence import resume as equivalence_resume
from ds_doctor.probes.equivalence import trainer as equivalence_trainer
from ds_doctor.probes.equivalence.cases import Route, variants
from ds_doctor.probes.equivalence.invariants import Judging, diverges, judge
from ds_doctor.probes.equivalence.knobs import Knobs, resume_at
from ds_doctor.probes.equivalence.reference import prestart as prestart_reference
from ds_doctor.probes.equivalence.resume import PATHS, fingerprint, resume_step
from ds_doctor.probes.equivalence.routes import LoaderRanOut, Session
from ds_doctor.probes.equivalence.sessions import follows_schedule, open_session
from ds_doctor.probes.equivalence.shrink import quiet, smallest
from ds_doctor.probes.equivalence.subject import Hyper, StepRecord, Subject, current_subject
from ds_doctor.probes.shared.common import accelerate_session, reset_accelerate

SPEC = ProbeSpec(
    name="equivalence",
    scenario="smoke",
    description="DDP/FSDP/DeepSpeed/Accelerate/Trainer: per-step loss, grad norm and parameters against plain torch; "
    "resume restores everything",
    world_sizes=(1, 2),
    requires=(TORCH,),
    timeout_s=240.0,
    deepspeed_ops=True,  # its DeepSpeed routes
)
__all__ = ["SPEC", "prepare", "run", "setup", "variants"]


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
    if route.wrapper is Wrapper.TRAINER:
        equivalence_trainer.run(ctx, route)
        return
    subject = current_subject(ctx.options, route.model)
    ctx.note(ModelNote.NOTE, subject.spec)
    with accelerate_session():
        opened = open_session(ctx, route, subject)
        ctx.add_findings(built_optimizer(opened))
        if route.resume:
            equivalence_resume.run(ctx, route, subject, opened)
            return
        records = train(opened)
    hyper, drawn_findings = drawn_order(opened)
    ctx.add_findings(drawn_findings)
    judge(
        ctx,
        route,
        subject,
        hyper,
        records,
        Judging(
            schedule=follows_schedule(route),
            outputs=opened.outputs,
            grads=opened.grads,
            ran_out=opened.ran_out,
            smallest=(lambda: smallest(ctx, route, lambda c, r: _rerun(c, r, subject)))
            if route.knobs is not None
            else None,
        ),
    )


def built_optimizer(opened: Session) -> list[Finding]:
    """A DeepSpeed engine's optimizer against the one its ZeRO configuration routes to (`zero_optimizer_built`):
    whatever its steps show, ZeRO-1 built as a non-ZeRO wrapper is not ZeRO-1."""
    from ds_doctor.plugins.checks import zero_optimizer_built
    from ds_doctor.probes.equivalence.invariants import setting
    from ds_doctor.probes.equivalence.routes import DeepSpeedSession

    if not isinstance(opened, DeepSpeedSession):
        return []
    return zero_optimizer_built(opened.built(), setting(opened.ctx, opened.route, opened.hyper))


def train(opened: Session) -> list[StepRecord]:
    """Every step of the opened route, then its engine and groups released. A matrix setting with `resume` saves
    at the middle step through the route's own checkpoint, and a fresh session of the same route (a new engine or
    Accelerator, in this process) loads it and takes the remaining steps: the reference is the run uninterrupted,
    and what the load left out of the parameters, the optimizer's state or the lr (digests: any dtype) is a finding
    of its own. A setting with `offload_states` moves the engine's states to the CPU and back before the middle
    step."""
    knobs = opened.route.knobs
    k = matrix_resume_step(knobs, opened.hyper.steps)
    # offload_states: the states moved aside and back before the middle step
    aside = resume_step(opened.hyper.steps) if knobs is not None and knobs.offload_states else None
    ctx, directory = opened.ctx, opened.ctx.scratch_dir() / "matrix-checkpoint"
    try:
        records = []
        for s in range(k):
            if s == aside:
                ctx.enter(f"offload_states / reload_states before step {s}")
                opened.offload_and_reload()
            try:
                records.append(opened.step(s))
            except LoaderRanOut as short:  # the steps it took are compared; the count is a finding
                opened.ran_out = str(short)
                return records
        if k < opened.hyper.steps:
            ctx.enter(f"save at step {k}")
            opened.save(directory)
            saved = fingerprint(opened, records[-1].params, rng=False)
    finally:
        opened.close()
    if k == opened.hyper.steps:
        return records
    reset_accelerate()  # Accelerate's singletons, between the saving Accelerator and the loading one
    again = open_session(quiet(ctx), opened.route, opened.subject)
    try:
        ctx.enter(f"load at step {k}, a fresh engine")
        again.load(directory)
        path = f"{PATHS[again.route.wrapper]}, into a fresh engine in the same process"
        ctx.add_findings(not_restored(saved, fingerprint(again, again.params(), rng=False), path))
        resumed = [again.step(s) for s in range(k, again.hyper.steps)]
        # what the resumed steps recorded for `where` (each module's output and its gradient), beside the first's
        opened.outputs.update(again.outputs)
        opened.grads.update(again.grads)
        return records + resumed
    finally:
        again.close()


def matrix_resume_step(knobs: Knobs | None, steps: int) -> int:
    """Where a matrix setting with "resume" saves and a fresh session goes on (`steps`: no resume): the middle
    step, or inside the second epoch with "shuffle" (`knobs.resume_at`), where the resumed loader must draw that
    epoch's order and skip the batches already trained."""
    if knobs is None or not knobs.resume:
        return steps
    return resume_at(knobs, resume_step(steps))


def _rerun(ctx: ProbeContext, route: Route, subject: Subject) -> bool:
    """A shrink's rerun on a session's route: whether it leaves the reference, on this rank."""
    with accelerate_session():
        opened = open_session(ctx, route, subject)
        records = train(opened)
    hyper, drawn_findings = drawn_order(opened)
    return bool(drawn_findings) or diverges(ctx, route, hyper, records)


def drawn_order(opened: Session) -> tuple[Hyper, list[Finding]]:
    """Where the order is the library's own (`rank_seeds`: Accelerate's default sampler, each rank seeded on its
    own), the samples every rank drew, gathered: each epoch must deal the dataset's samples once between the ranks
    (`samples_finding`), and the reference trains on them (its math, their order). Elsewhere the setting's own."""
    from ds_doctor.plugins.checks import samples_finding
    from ds_doctor.probes.equivalence.knobs import EPOCH_STEPS

    knobs, hyper = opened.route.knobs, opened.hyper
    if knobs is None or not knobs.rank_seeds:
        return hyper, []
    mine = [[s, k, indices] for s, k, indices in opened.drawn]
    everyone = opened.ctx.all_gather_json(mine)
    order = tuple((s, k, rank, tuple(i)) for rank, drawn in enumerate(everyone) for s, k, i in drawn)
    epochs: list[list[int]] = [[] for _ in range(-(-hyper.steps // EPOCH_STEPS))]
    for s, _k, _rank, indices in order:
        epochs[s // EPOCH_STEPS].extend(indices)
    setting = f"{opened.route.name} at {opened.ctx.world_size} rank(s)"
    return dataclasses.replace(hyper, order=order), samples_finding(epochs, opened.samples, setting)

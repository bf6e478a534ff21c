"""Planted divergences for the equivalence family, registered only by the tests (DS_DOCTOR_EXTRA_PROBES): routes
that get the math wrong the way users do, run through the family's own `run`. Each must fail at two ranks with the
right step, stage and parameter (and, for a shard-local clip, pass at one rank)."""

from __future__ import annotations

import dataclasses

from ds_doctor.plugins import Variant
from ds_doctor.probes.equivalence import cases
from ds_doctor.probes.equivalence import probe as equivalence
from ds_doctor.probes.equivalence.knobs import Knobs

SPEC = dataclasses.replace(
    equivalence.SPEC,
    name="equivalence_planted",
    description="equivalence with planted divergences (tests only)",
)
_BY_NAME = {route.name: route for route in cases.ROUTES}
REGRESSION = "tests.resources.equivalence_models:regression"
PLANTED = (
    # a user's module that divides its loss by the world size on top of DDP's gradient average
    dataclasses.replace(
        _BY_NAME["ddp"],
        name="ddp-loss-over-world-size",
        model="tests.resources.equivalence_models:loss_over_world_size",
        issue="ddp_loss_averaged_twice",
        what="DDP on a module whose loss is divided by the world size by hand",
    ),
    dataclasses.replace(
        _BY_NAME["deepspeed-z2"],
        name="deepspeed-z2-loss-over-world-size",
        model="tests.resources.equivalence_models:loss_over_world_size",
        issue="ddp_loss_averaged_twice",
        what="ZeRO-2 on a module whose loss is divided by the world size by hand",
    ),
    # a user's module that divides its loss by dist.get_world_size() whenever a process group is up: only a
    # reference computed with no process group (ds_doctor.probes.equivalence.reference) sees world size 1
    *(
        dataclasses.replace(
            _BY_NAME[route],
            name=f"{route}-averaged-by-hand",
            model="tests.resources.equivalence_models:loss_over_process_group",
            issue="ddp_loss_averaged_twice",
            what=f"{route} on a module whose loss is divided by dist.get_world_size() by hand",
        )
        for route in ("ddp", "fsdp2", "deepspeed-z2", "deepspeed-z3")
    ),
    # a layer in the middle that divides by the process group's size: the divergence starts at its output
    dataclasses.replace(
        _BY_NAME["ddp"],
        name="ddp-mid-layer-by-hand",
        model="tests.resources.equivalence_models:mid_layer_over_process_group",
        issue="ddp_loss_averaged_twice",
        what="DDP on a module with a layer that divides by dist.get_world_size()",
    ),
    # a matrix setting on that module: the divergence is the module's, so the shrink finds the route's defaults
    cases.with_knobs(
        dataclasses.replace(
            _BY_NAME["ddp"],
            name="matrix-ddp-ga4-decay-warmup-loss-over-world-size",
            model="tests.resources.equivalence_models:loss_over_world_size",
            issue="ddp_loss_averaged_twice",
            what="DDP at ga4, decay groups and a warm-up, on a module whose loss is divided by the world size",
        ),
        Knobs(accumulation=4, groups="decay", schedule="warmup"),
    ),
    # the same, where the setting with precision back at fp32 raises: the shrink keeps bf16 and says why
    cases.with_knobs(
        dataclasses.replace(
            _BY_NAME["ddp"],
            name="matrix-ddp-bf16-ga4-refuses-fp32",
            model="tests.resources.equivalence_models:refuses_full_precision",
            issue="ddp_loss_averaged_twice",
            what="DDP in bf16 at ga4 on a module that divides its loss by the world size and raises in fp32",
        ),
        Knobs(precision="bf16", accumulation=4),
    ),
    # the matrix's resume knob on a load that leaves the optimizer's state out: the first resumed step diverges
    cases.with_knobs(
        dataclasses.replace(
            _BY_NAME["deepspeed-z2"],
            name="matrix-deepspeed-z2-resume-no-optimizer",
            drop=("optimizer",),
            model=REGRESSION,
            issue="ds_resume_state_not_restored",
            what="ZeRO-2 saved at step 2 and loaded into a fresh engine with load_optimizer_states=False",
        ),
        Knobs(resume=True),
    ),
    # the Trainer on GPT-2, whose labels this stack counts unshifted (trainer-num-items) at a matrix setting: the
    # divergence is the model's whatever the knobs, so the Trainer's shrink finds the defaults
    cases.with_knobs(
        dataclasses.replace(
            _BY_NAME["trainer-num-items"],
            name="matrix-trainer-ga4-noclip-gpt2-num-items",
            reproduce=False,
            what="the Trainer on GPT-2 at ga4 without clipping (its labels counted unshifted)",
        ),
        Knobs(accumulation=4, clip=False),
    ),
    # FSDP1 clipped with torch.nn.utils.clip_grad_norm_: each rank's norm of its own FlatParameter shards
    dataclasses.replace(
        _BY_NAME["fsdp1"],
        name="fsdp1-torch-clip",
        local_clip=True,
        issue="fsdp1_clip_grad_norm_local_shards",
        what="FSDP1 clipped with torch.nn.utils.clip_grad_norm_ (a shard's norm, not the global one)",
    ),
    # resumes that restore less than they saved (on the MLP as a user factory whatever --model says: the new
    # process then imports no transformers, which keeps the test's run short)
    dataclasses.replace(
        _BY_NAME["resume-deepspeed"],
        name="resume-deepspeed-no-optimizer",
        drop=("optimizer",),
        issue="ds_resume_state_not_restored",
        model=REGRESSION,
        what="load_checkpoint(load_optimizer_states=False)",
    ),
    dataclasses.replace(
        _BY_NAME["resume-accelerate"],
        name="resume-accelerate-scheduler-not-prepared",
        drop=("scheduler",),
        model=REGRESSION,
        issue="acc_resume_scheduler_not_registered",
        what="a LambdaLR stepped by hand but never passed to prepare (so never saved by save_state)",
    ),
)


def variants() -> list[Variant]:
    return [Variant(route.name, route, level=2) for route in PLANTED]


setup = equivalence.setup
run = equivalence.run

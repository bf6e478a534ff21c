"""S4: where an optimizer's tensors are after an Accelerate `save_state` / `load_state` round trip.

For torch AdamW, prodigyopt's Prodigy and prodigy-plus-schedule-free (which keeps
`running_d_numerator` / `running_d_denom` as tensors inside `param_groups`): prepare, one step,
`save_state`; a fresh model and optimizer, prepare, `load_state` (the recommended resume path,
default `map_location`), one more step. Device maps at `after_prepare`, `after_load`,
`after_step`. Invariant: every tensor reachable from the optimizer (per-parameter `state`, and
everything nested in each `param_groups[i]` but `params`) is on the device of that group's
parameters. A misplacement right after `load_state` is a warning when the next step copes with
it, an error when the step raises; one still there after the step is an error.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ds_doctor.plugins import (
    AccelerateConfigNote,
    Finding,
    ProbeContext,
    ProbeSpec,
    RankOptions,
    Requirement,
    Severity,
    Variant,
)
from ds_doctor.plugins.checks import (
    buffer_placement,
    optimizer_state_colocation,
    process_count_agreement,
    ties_kept,
)
from ds_doctor.plugins.requirements import ACCELERATE, PRODIGY, PRODIGY_PLUS, TORCH
from ds_doctor.plugins.usersetup import accelerate_config
from ds_doctor.probes.shared.common import accelerate_session, dist_world_size
from ds_doctor.probes.shared.models import batch, build_mlp

SPEC = ProbeSpec(
    name="optimizer_state_placement",
    scenario="S4",
    description="Accelerate save_state/load_state: optimizer state and param_group tensors on their parameters' device",
    world_sizes=(1, 2),
    requires=(TORCH, ACCELERATE),
    timeout_s=120.0,
)


@dataclasses.dataclass(frozen=True)
class OptimizerCase:
    name: str
    requirement: Requirement  # the module to import and its pip name
    issue: str | None = None  # the known issue named for the case
    user_accelerate: bool = False  # built from the user's --accelerate-config


OPTIMIZERS = (
    OptimizerCase("adamw", TORCH),
    OptimizerCase("prodigy", PRODIGY),
    OptimizerCase("prodigy-plus-schedule-free", PRODIGY_PLUS, "prodigy_group_tensors_left_on_cpu"),
)
MICRO_BATCH = 4
REMEDY = (
    "After accelerator.load_state move each param group's tensors to the device of the group's first "
    'parameter; or load_state(dir, map_location="on_device"); or upgrade an optimizer that has no guard '
    "(prodigy-plus-schedule-free >= 1.9.2 moves them back on access)."
)


def variants(options: RankOptions) -> list[Variant]:
    cases = list(OPTIMIZERS)
    if options.accelerate_config is not None:
        cases += [
            dataclasses.replace(c, name=f"{c.name}-user-accelerate-config", user_accelerate=True)
            for c in OPTIMIZERS
        ]
    return [Variant(name=case.name, params=case, level=2 if case.issue else 3) for case in cases]


def make_optimizer(name: str, params: Any) -> Any:
    import torch

    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    if name == "prodigy":
        from prodigyopt import Prodigy

        return Prodigy(params, lr=1.0)
    from prodigyplus import ProdigyPlusScheduleFree

    return ProdigyPlusScheduleFree(params, lr=1.0)


def placement(records: list[Any], severity: Severity) -> list[Finding]:
    """I3 over one stage's records, with a remedy; `severity` for a misplacement the next step may survive."""
    return [
        dataclasses.replace(f, severity=severity, remedy=REMEDY) for f in optimizer_state_colocation(records)
    ]


def run(ctx: ProbeContext) -> None:
    """Prepare, step, save_state; then a fresh run's load_state and first step, with the device maps between."""
    case: OptimizerCase = ctx.params
    name = case.name.removesuffix("-user-accelerate-config")
    ctx.require(case.requirement)
    setup = _user_setup(ctx, case)
    ctx.note("optimizer_version", _version(case.requirement.pip))
    with accelerate_session():
        checkpoint = ctx.scratch_dir() / "state"
        if _train_and_save(ctx, name, setup, checkpoint):
            _resume(ctx, name, setup, checkpoint, case.issue)


def _user_setup(ctx: ProbeContext, case: OptimizerCase) -> Any:
    """The user's --accelerate-config for a `-user-accelerate-config` case (skipped where this node cannot run
    what it asks for); None for the family's own cases."""
    setup = ctx.options.user_accelerate_config() if case.user_accelerate else None
    if setup is not None:
        ctx.note(AccelerateConfigNote.NOTE, setup.summary())
        if reason := accelerate_config.skip_reason(setup, ctx.device_kind):
            ctx.skip(reason)
    return setup


def _train_and_save(ctx: ProbeContext, name: str, setup: Any, checkpoint: Path) -> bool:
    """The first run: prepare, one step, save_state. False where the ranks disagree on the process count: every
    rank would act as the main process and write the same checkpoint files."""
    ctx.enter("prepare")
    accelerator, model, optimizer, user = _prepared(ctx, name, setup)
    ctx.note("accelerate_distributed_type", accelerator.distributed_type.value)
    ctx.add_findings(process_count_agreement(accelerator.num_processes, dist_world_size()))
    if ctx.has_error_findings:
        return False
    _step(ctx, accelerator, model, optimizer, user, seed=0)
    ctx.add_findings(
        placement(ctx.snapshot("after_prepare", module=model, optimizer=optimizer), Severity.ERROR)
    )
    ctx.enter("save_state")
    accelerator.save_state(str(checkpoint))
    accelerator.wait_for_everyone()
    return True


def _resume(ctx: ProbeContext, name: str, setup: Any, checkpoint: Path, issue_id: str | None) -> None:
    """A fresh run resuming from the checkpoint. A misplacement after load_state is a warning when the next step
    copes with it, an error (and the reason) when the step raises; one still there after the step is an error."""
    accelerator, model, optimizer, user = _prepared(ctx, name, setup)
    ctx.enter("load_state")
    accelerator.load_state(str(checkpoint))
    after_load = ctx.snapshot("after_load", module=model, optimizer=optimizer)
    ctx.add_findings(buffer_placement(ctx.records, str(accelerator.device), "after_load"))
    ctx.add_findings(ties_kept(ctx.records, "after_prepare", "after_load"))  # the resumed model is still tied
    misplaced = placement(after_load, Severity.ERROR)
    try:
        _step(ctx, accelerator, model, optimizer, user, seed=1)
    except Exception:
        ctx.add_findings(
            misplaced
        )  # the step after load_state raised: the misplacement is why (or it is an error)
        showed = ["the first step after load_state raised"] if misplaced else []
        ctx.reproduce(issue_id, showed=showed, caught=bool(misplaced))
        if misplaced:
            return
        raise
    ctx.add_findings(
        dataclasses.replace(
            f, severity=Severity.WARNING, message=f.message + " (the next step coped with it)"
        )
        for f in misplaced
    )
    ctx.add_findings(placement(ctx.snapshot("after_step", module=model, optimizer=optimizer), Severity.ERROR))
    ctx.reproduce(issue_id)


def _prepared(ctx: ProbeContext, name: str, setup: Any = None) -> tuple[Any, Any, Any, Any]:
    """A new Accelerator (as a new run has, from the user's config when given) with a prepared model (the user's
    when `--model` names one) and optimizer."""
    import torch
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import InitProcessGroupKwargs

    extra = accelerate_config.accelerator_kwargs(setup) if setup is not None else {}
    # on CPU, Accelerate needs cpu=True to see the process group (without it: one process per rank, measured); with
    # it, it drops a DeepSpeed plugin and runs MULTI_CPU (measured), so a DeepSpeed config goes without it
    cpu = ctx.device_kind == "cpu" and "deepspeed_plugin" not in extra
    AcceleratorState._reset_state()  # a fresh run's Accelerator: Accelerate refuses a second DeepSpeed plugin otherwise
    accelerator = Accelerator(cpu=cpu, kwargs_handlers=[InitProcessGroupKwargs(backend=ctx.backend)], **extra)
    user = ctx.user_model()
    model = user.module if user is not None else build_mlp(seed=0)
    # its "auto" batch sizes come from a prepared dataloader, as in a real job
    if "deepspeed_plugin" in extra:
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(torch.zeros(8, 1)), batch_size=MICRO_BATCH
        )
        model, optimizer, _ = accelerator.prepare(model, make_optimizer(name, model.parameters()), loader)
    else:
        model, optimizer = accelerator.prepare(model, make_optimizer(name, model.parameters()))
    if setup is not None:
        ctx.add_findings(_config_honoured(setup.distributed_type, accelerator.distributed_type.value))
    return accelerator, model, optimizer, user


def _config_honoured(asked: str, runs: str) -> list[Finding]:
    """The user's config asks for a distributed type; Accelerate may quietly run another."""
    same = asked == runs or (asked in ("NO", "MULTI_CPU") and runs in ("NO", "MULTI_CPU"))
    return (
        []
        if same
        else [
            Finding(
                "accelerate_config_honoured",
                Severity.ERROR,
                f"the Accelerate config asks for {asked}; the prepared Accelerator runs {runs}",
                stage="prepare",
                expected=f"distributed_type {asked}",
            )
        ]
    )


def _step(ctx: ProbeContext, accelerator: Any, model: Any, optimizer: Any, user: Any, *, seed: int) -> None:
    """One step on the user's model and batches (`user`, from `--model`) or the tiny MLP's regression."""
    import torch

    ctx.enter(f"step {seed}")
    dtype = next(model.parameters()).dtype  # bf16 under DeepSpeed's bf16: its inputs must match
    if user is not None:
        loss = user.loss(
            model, MICRO_BATCH, device=accelerator.device, dtype=dtype, seed=100 * ctx.rank + seed
        )
    else:
        x, y = batch(MICRO_BATCH, dtype=dtype, device=accelerator.device, seed=100 * ctx.rank + seed)
        loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None

"""S3: which parameters the optimizer tracks after a framework wraps the model and the optimizer.

A tiny model in four parts (`ds_doctor.probes.coverage.subject`): `a` trainable and in the optimizer; `b` requires
grad but is left out of the optimizer on purpose; `c` frozen; `head` in the optimizer; one AdamW group over `a` and
`head`. Each route wraps it the way users do (`ds_doctor.probes.coverage.routes`). Before the step: the set of names
(and groups) the optimizer tracks equals the unwrapped one, and every tracked tensor is a live parameter of the
wrapped model. After one step, with values gathered across ranks: exactly `a` and `head` changed. The reproduce
routes build the optimizer before wrapping where that leaves it with orphans (`ds_doctor.probes.coverage.cases`).
"""

from __future__ import annotations

import contextlib
import importlib.util

from ds_doctor.plugins import ProbeContext, ProbeSpec, Wrapper
from ds_doctor.plugins.checks import step_changes, tracked_live, tracked_set
from ds_doctor.plugins.collect import optimizer_groups, tracked_names
from ds_doctor.plugins.requirements import DEEPSPEED, TORCH
from ds_doctor.probes.coverage.cases import Route, variants
from ds_doctor.probes.coverage.invariants import changed_by_step, tracked_everywhere
from ds_doctor.probes.coverage.routes import wrap
from ds_doctor.probes.coverage.subject import FROZEN, INTENDED, build_model, grouped_optimizer, subject
from ds_doctor.probes.shared.common import build_deepspeed_ops

SPEC = ProbeSpec(
    name="optimizer_coverage",
    scenario="S3",
    description="FSDP1/FSDP2/DeepSpeed/Accelerate wrapping: the optimizer tracks the same parameters, and "
    "exactly they train",
    world_sizes=(1, 2),
    requires=(TORCH,),
    timeout_s=180.0,
    deepspeed_ops=True,  # its DeepSpeed routes
    known_issues=("fsdp_optimizer_built_before_wrap", "composer_single_group_rebuild"),
    across_nodes=("fsdp2",),  # also across every node of a multi-node run
)
__all__ = ["SPEC", "run", "setup", "variants"]


def setup(ctx: ProbeContext) -> None:
    """DeepSpeed's optimizer ops, once per launch, where DeepSpeed imports. Only its routes need them: a DeepSpeed
    that is installed but does not import (it needs numpy, torch does not) fails those routes, not the FSDP ones."""
    if importlib.util.find_spec(DEEPSPEED.module) is None:
        return
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        return  # each DeepSpeed route raises the import error itself, classified
    build_deepspeed_ops(ctx)


def run(ctx: ProbeContext) -> None:
    route: Route = ctx.params
    ctx.note("route", route.what, shown=True)
    if ctx.has_user_model and route.wrapper is not Wrapper.DEEPSPEED:
        ctx.skip(
            f"the {route.wrapper} route wraps ds-doctor's own four-part model only; --model runs on the "
            "deepspeed routes"
        )
    model = subject(ctx, route.parts, build_model, INTENDED, FROZEN)
    reference = model.build(0)
    optimizer = grouped_optimizer(reference, route.parts) if route.groups else model.optimizer(reference)
    before = tracked_names(optimizer_groups(optimizer), reference)
    ctx.note("tracked_before", sorted(before.groups), shown=True)
    with contextlib.ExitStack() as cleanup:
        wrapped = wrap(ctx, route, cleanup, model)
        ctx.enter("after_wrap")
        after = tracked_everywhere(ctx, tracked_names(optimizer_groups(wrapped.optimizer), wrapped.module))
        ctx.note("tracked_after", sorted(after.groups), shown=True)
        moved = tracked_set(before.groups, after.groups, model.frozen)
        ctx.add_findings(moved + tracked_live(after))
        ctx.enter("step")
        values = wrapped.full_values()
        wrapped.step()
        changed = changed_by_step(values, wrapped.full_values())
        ctx.note("changed_by_step", changed, shown=True)
        missed = step_changes(changed, model.intended)
        # what went wrong for real: an xfail if the checks above caught it first, else a fail
        if route.reproduce:
            ctx.reproduce(
                route.known_issue,
                showed=[finding.message for finding in missed],
                caught=any(f.is_error for f in moved),
            )
        else:
            ctx.add_findings(missed)

"""The equivalence family's own judgement: a route's steps against the reference's, held to the tolerance its dtype
and setting allow (`ds_doctor.plugins.checks`' divergence and its bounds), the first divergence as the finding, where
it starts, and what known issue it is. Shared by the case, the resume cases and the Trainer route."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ds_doctor.plugins import ProbeContext, StepTable, Wrapper
from ds_doctor.plugins.checks import (
    Tolerance,
    divergence_finding,
    first_divergence,
    largest,
    missing_finding,
    steps_finding,
    worst_ratio,
)
from ds_doctor.probes.equivalence.cases import Route
from ds_doctor.probes.equivalence.reference import independent as independent_reference
from ds_doctor.probes.equivalence.subject import (
    Hyper,
    StepRecord,
    Subject,
    bitwise_equal,
    clipped_steps,
    gaps,
)

#: routes whose reference performs the route's own operations in the route's order (on the CPU, at 1 or 2 ranks, in
#: fp32, where the all-reduce average of two values is exact): held to equality
EXACT = (Wrapper.DDP, Wrapper.ACCELERATE)


def tolerance_for(ctx: ProbeContext, route: Route, hyper: Hyper) -> Tolerance:
    exact = (
        route.wrapper in EXACT
        and not route.user_accelerate
        and not route.sync_each_batch  # an all-reduce per micro-batch adds in another order than the reference
        and hyper.dtype == "float32"
        and ctx.world_size <= 2
        and ctx.device_kind == "cpu"
    )
    return Tolerance(hyper.dtype, exact=exact)


def setting(ctx: ProbeContext, route: Route, hyper: Hyper) -> str:
    extra = f", zero stage {route.stage}" if route.wrapper.zero else ""
    extra += ", offload_optimizer cpu" if route.offload else ""
    if route.knobs is not None:
        extra += f"; the knobs turned: {route.knobs.describe()}"
    return f"{route.name} at {ctx.world_size} rank(s): {hyper.describe()}{extra}"


#: what `judge`'s explain returns for a divergence no known issue fits
UNEXPLAINED = "(no known issue fits)"


@dataclasses.dataclass(frozen=True)
class Judging:
    """How a route's steps are judged: whether the reference follows the route's schedule; the remedy a divergence
    names; a reference computed by the route itself (the Trainer's token mean); `explain(reference)`, the known issue
    a divergence is where the route tells them apart: an id, UNEXPLAINED (no known issue fits), or None (the
    route's own)."""

    schedule: bool = False
    remedy: str | None = None
    reference_run: list[StepRecord] | None = None
    explain: Callable[[list[StepRecord]], str | None] | None = None
    outputs: dict[int, dict[str, Any]] | None = None  # the route's module outputs per step (where.py)
    grads: dict[int, dict[str, Any]] | None = None  # the gradients of those outputs per step
    # the reference's request for each module's output at a step (rank 0's micro-batch 0), where the route's
    # reference is not the family's subject (the Trainer's token mean); None: the subject's
    outputs_request: Callable[[int], dict[str, Any]] | None = None
    # a matrix setting's divergence: the smallest setting found that still shows it, in words (`probe.smallest`)
    smallest: Callable[[], str] | None = None
    ran_out: str | None = None  # why the route's steps ended early, where they did (`routes.LoaderRanOut`)


def judge(
    ctx: ProbeContext, route: Route, subject: Subject, hyper: Hyper, records: list[StepRecord], how: Judging
) -> None:
    """The route's steps against the reference's: the first divergence is the finding."""
    schedule, remedy, reference_run, explain = how.schedule, how.remedy, how.reference_run, how.explain
    ctx.enter("reference")
    ref = (
        reference_run
        if reference_run is not None
        else subject_reference(ctx, route, hyper, records, schedule)
    )
    tolerance = tolerance_for(ctx, route, hyper)
    compared, missing = gaps(ref, records)
    ctx.note(
        StepTable.NOTE,
        {
            "tolerance": tolerance.describe(),
            "bitwise_equal": bitwise_equal(ref, records),
            "worst_error_over_tolerance": _finite(worst_ratio(compared, tolerance)),
            "largest": largest(compared, tolerance),
            "steps": [
                {
                    "loss": {"route": g.loss, "reference": r.loss},
                    "grad_norm": {"route": g.grad_norm, "reference": r.grad_norm},
                    "lr": g.lr,
                }
                for r, g in zip(ref, records, strict=False)
            ],
            "clipping_engaged_steps": clipped_steps(ref, hyper.clip),
            "setting": hyper.describe(),
        },
    )
    findings = missing_finding(missing, "update", setting(ctx, route, hyper))
    findings += steps_finding(len(ref), len(records), setting(ctx, route, hyper), how.ran_out)
    divergence = first_divergence(compared, tolerance)
    if divergence is not None and how.outputs:
        request = (
            how.outputs_request(divergence.step)
            if how.outputs_request is not None
            else outputs_request(ctx, route, hyper, records if schedule else None, divergence.step)
        )
        where_it_starts(ctx, request, divergence, tolerance, (how.outputs, how.grads or {}))
    if divergence is not None:
        said = setting(ctx, route, hyper)
        if how.smallest is not None:
            said += f"; {how.smallest()}"
        findings.append(
            divergence_finding(
                divergence, hyper.steps, said, remedy, first_divergence(compared, tolerance, ("update",))
            )
        )
    ctx.add_findings(findings)
    # a matrix setting's failure, a divergence or what its resume's load left out (`probe.train`'s findings)
    failed = bool(findings) or (route.knobs is not None and ctx.has_error_findings)
    # a window never stepped (or stepped twice) is the setting's own bug before any loss scale the explainer reads
    miscounted = route.knobs is not None and len(ref) != len(records)
    step = divergence.step + 1 if divergence is not None else None
    issue = (
        (matrix_issue(route, ctx.world_size, step=step) if miscounted else None)
        or (explain(ref) if explain is not None and findings else None)
        or (matrix_issue(route, ctx.world_size, step=step) if route.knobs is not None and failed else None)
        or route.issue
    )
    if route.reproduce and issue != route.issue:  # another issue showing is no reproduction of this one
        ctx.reproduce(None if issue == UNEXPLAINED else issue, instead=True)
    elif issue:
        showed = [finding.message for finding in findings] if route.reproduce else []
        ctx.reproduce(issue, showed=showed, caught=failed)


def matrix_issue(
    route: Route,
    world_size: int,
    installed: Callable[[str], str | None] | None = None,
    step: int | None = None,
) -> str | None:
    """The catalog's silent bug a diverging matrix setting fits (every condition of the entry's `knobs`; `step`, the
    1-based step where it diverged, where known) on an affected release of the stack it ran on (`installed`: a
    package's version, default the one this process imports): the entry with the most conditions where several fit;
    None where none does."""
    from ds_doctor.plugins.known import fitting_silent_issue
    from ds_doctor.probes.equivalence.cases import matrix_route
    from ds_doctor.probes.equivalence.knobs import fits

    knobs, name = route.knobs, matrix_route(route)
    assert knobs is not None
    return fitting_silent_issue(lambda conditions: fits(conditions, name, knobs, world_size, step), installed)


def subject_reference(
    ctx: ProbeContext, route: Route, hyper: Hyper, records: list[StepRecord], schedule: bool = False
) -> list[StepRecord]:
    """The independent reference of the route's model at `hyper` (rank 0's reference process, sent to every rank);
    `schedule`: each step's lr copied from the route's `records` (the resume routes), else the documented one."""
    return independent_reference(
        {
            "call": "ds_doctor.probes.equivalence.reference:subject_reference",
            "args": (
                ctx.options.to_json(),
                route.model,
                hyper,
                ctx.world_size,
                [r.lr for r in records] if schedule else None,
            ),
        },
        ctx.rank,
        ctx.world_size,
        ctx.device,
    )


def diverges(
    ctx: ProbeContext,
    route: Route,
    hyper: Hyper,
    records: list[StepRecord],
    reference_run: list[StepRecord] | None = None,
) -> bool:
    """Whether the route's steps leave the reference's tolerance anywhere, on this rank (`agree` makes it every
    rank's); `reference_run` where the route computes its own (the Trainer's token mean), else the subject's."""
    ref = reference_run if reference_run is not None else subject_reference(ctx, route, hyper, records)
    compared, _ = gaps(ref, records)
    return first_divergence(compared, tolerance_for(ctx, route, hyper)) is not None


def agree(ctx: ProbeContext, answer: int) -> int:
    """The largest of every rank's `answer` (an all-reduce), so that all ranks go on with the same next run."""
    if ctx.world_size > 1:
        import torch
        import torch.distributed as dist

        flag = torch.tensor([answer], device=ctx.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())
    return answer


def outputs_request(
    ctx: ProbeContext, route: Route, hyper: Hyper, scheduled: list[StepRecord] | None, step: int
) -> dict[str, Any]:
    """The reference's request for each module's output on rank 0's micro-batch 0 at `step` (the family's
    subject)."""
    return {
        "call": "ds_doctor.probes.equivalence.reference:subject_outputs",
        "args": (
            ctx.options.to_json(),
            route.model,
            hyper,
            ctx.world_size,
            [r.lr for r in scheduled] if scheduled is not None else None,
            step,
            0,
        ),
    }


def where_it_starts(
    ctx: ProbeContext,
    request: dict[str, Any],
    divergence: Any,
    tolerance: Any,
    recorded: tuple[dict[int, dict[str, Any]], dict[int, dict[str, Any]]],
) -> None:
    """At the first diverging step, the first module whose output (then whose output's gradient) leaves the
    reference's (rank 0's micro-batch 0), noted for the reader; every rank takes part in the reference's answer
    (`request`), rank 0 compares. `recorded`: the route's module outputs and their gradients, per step."""
    from ds_doctor.probes.equivalence import where

    step = divergence.step
    reference = independent_reference(request, ctx.rank, ctx.world_size, ctx.device)
    outputs, grads = recorded
    if ctx.rank != 0 or step not in outputs:
        return
    bound = max(tolerance.at(step), where.FLOOR)
    mine, theirs = outputs[step], reference["outputs"]
    compared = sum(1 for name in mine if name in theirs)
    found = where.first_module_over(mine, theirs, bound)
    backward = None
    if found is None:
        my_grads, their_grads = grads.get(step, {}), reference["grads"]
        backward = (
            where.first_module_over(my_grads, their_grads, bound),
            sum(1 for name in my_grads if name in their_grads),
            next(iter(my_grads), None),
        )
    ctx.note(
        "divergence_starts",
        where.describe(step + 1, found, compared, bound, backward, divergence.stage, next(iter(mine), None)),
        shown=True,
    )


def _finite(value: float) -> float | None:
    return value if value != float("inf") else None

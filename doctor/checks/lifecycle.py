"""Lifecycle invariants (S0): what `accelerator.prepare` hands back when DeepSpeed owns the optimizer
and the scheduler. Pure functions over a `PreparedFacts` the probe (or a user) collects right
after `prepare` and over a few steps, so each is testable with planted facts."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

from ds_doctor.reports.model import Finding, Severity

PLACEHOLDERS = ("DummyOptim", "DummyScheduler")
STAGE = "after_prepare"


@dataclasses.dataclass(frozen=True)
class PreparedFacts:
    """What prepare returned and what the run around it says; `None` where unknown."""

    optimizer_class: str  # the prepared optimizer's class name, and what it wraps
    optimizer_inner_class: str | None
    scheduler_class: str | None
    scheduler_inner_class: str | None
    optimizer_wraps_engine: bool  # prepared_optimizer.optimizer is engine.optimizer
    # prepared_scheduler.scheduler is engine.lr_scheduler (None: no scheduler)
    scheduler_wraps_engine: bool | None
    num_processes: int  # accelerator.num_processes
    dist_world_size: int | None  # torch.distributed world size
    dp_world_size: int | None  # engine.dp_world_size
    config_lr: Any = None  # the optimizer lr as the user's DeepSpeed config wrote it (a number or "auto")
    dummy_lr: float | None = None  # DummyOptim(lr=...)
    resolved_lr: float | None = None  # the config's optimizer lr after prepare filled "auto"
    warmup_max_lr: float | None = None  # the config's scheduler peak after prepare
    lr_trace: tuple[float, ...] = ()  # the lr each step ran with
    decays: bool = True  # the config's scheduler decays after its warm-up (WarmupLR holds the peak)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["lr_trace"] = list(self.lr_trace)
        return data


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def no_placeholder(facts: PreparedFacts) -> list[Finding]:
    """No DummyOptim / DummyScheduler survives prepare."""
    return placeholders_among(
        (
            facts.optimizer_class,
            facts.optimizer_inner_class,
            facts.scheduler_class,
            facts.scheduler_inner_class,
        )
    )


def placeholders_among(
    class_names: Sequence[str | None], *, rank: int | None = None, stage: str = STAGE
) -> list[Finding]:
    """An error per placeholder class among what prepare returned (the probe's facts, or a watched job's objects)."""
    return [
        Finding(
            "no_placeholder",
            Severity.ERROR,
            f"{name} survived accelerator.prepare: the code holds a placeholder, not DeepSpeed's object",
            rank=rank,
            stage=stage,
            expected="prepare returns wrappers of the engine's optimizer and scheduler",
            remedy="Pass model, DummyOptim, dataloader and DummyScheduler to one accelerator.prepare call "
            "and use the objects it returns.",
        )
        for name in class_names
        if name in PLACEHOLDERS
    ]


def wraps_engine(facts: PreparedFacts) -> list[Finding]:
    """The prepared optimizer wraps `engine.optimizer`, the prepared scheduler `engine.lr_scheduler`."""
    findings = []
    if not facts.optimizer_wraps_engine:
        findings.append(
            Finding(
                "wraps_engine",
                Severity.ERROR,
                f"the prepared optimizer ({facts.optimizer_class} of {facts.optimizer_inner_class}) "
                "does not wrap engine.optimizer",
                stage=STAGE,
                expected="prepared_optimizer.optimizer is engine.optimizer",
            )
        )
    if facts.scheduler_wraps_engine is False:
        findings.append(
            Finding(
                "wraps_engine",
                Severity.ERROR,
                f"the prepared scheduler ({facts.scheduler_class} of {facts.scheduler_inner_class}) "
                "does not wrap engine.lr_scheduler: stepping it does not move DeepSpeed's lr",
                stage=STAGE,
                expected="prepared_scheduler.scheduler is engine.lr_scheduler",
            )
        )
    return findings


def world_size_agreement(facts: PreparedFacts) -> list[Finding]:
    """accelerator.num_processes == torch.distributed world size == engine.dp_world_size."""
    return process_count_agreement(facts.num_processes, facts.dist_world_size, facts.dp_world_size)


def process_count_agreement(
    num_processes: int, dist_world_size: int | None, dp_world_size: int | None = None, *, stage: str = STAGE
) -> list[Finding]:
    """Accelerate, the process group and (where there is one) the engine count the same processes."""
    sizes = {
        "accelerator.num_processes": num_processes,
        "dist world size": dist_world_size,
        "engine.dp_world_size": dp_world_size,
    }
    known = {k: v for k, v in sizes.items() if v is not None}
    if len(set(known.values())) <= 1:
        return []
    listed = ", ".join(f"{k} = {v}" for k, v in known.items())
    return [
        Finding(
            "world_size_agreement",
            Severity.ERROR,
            f"Accelerate and the process group disagree on the number of processes: {listed}",
            stage=stage,
            expected="one number of processes everywhere",
            remedy='On CPU pass cpu=True, or kwargs_handlers=[InitProcessGroupKwargs(backend="gloo")] with a '
            "DeepSpeed plugin, to Accelerator (otherwise Accelerate picks no backend and reports one process per "
            "rank, and every rank acts as the main process).",
        )
    ]


def lr_agreement(facts: PreparedFacts) -> list[Finding]:
    """The config's optimizer lr and DummyOptim's lr agree (a mismatch is kept silently)."""
    if (
        facts.dummy_lr is None
        or not isinstance(facts.config_lr, (int, float))
        or _close(facts.config_lr, facts.dummy_lr)
    ):
        return []
    peak = "" if facts.warmup_max_lr is None else f"; the schedule peaks at {facts.warmup_max_lr:g}"
    return [
        Finding(
            "lr_agreement",
            Severity.ERROR,
            f"the DeepSpeed config sets optimizer lr {facts.config_lr:g} but DummyOptim was given "
            f'lr {facts.dummy_lr:g}: the config lr is kept, while warmup_max_lr "auto" is filled from '
            f"DummyOptim{peak}",
            stage=STAGE,
            expected="one learning rate",
            remedy='Write "lr": "auto" in the config (filled from DummyOptim) or the same value in both.',
        )
    ]


def lr_schedule(facts: PreparedFacts) -> list[Finding]:
    """Over the steps run, the lr warms up to the configured peak and then decays."""
    trace: Sequence[float] = facts.lr_trace
    if len(trace) < 3 or facts.warmup_max_lr is None:
        return []
    peak_at = max(range(len(trace)), key=lambda i: trace[i])
    peak = trace[peak_at]
    problems = []
    if not _close(peak, facts.warmup_max_lr):
        problems.append(f"peaks at {peak:g}, not at the configured warmup_max_lr {facts.warmup_max_lr:g}")
    if not (trace[0] < peak and all(a <= b for a, b in itertools.pairwise(trace[: peak_at + 1]))):
        problems.append("does not warm up to its peak")
    if facts.decays and not (
        trace[-1] < peak and all(a >= b for a, b in itertools.pairwise(trace[peak_at:]))
    ):
        problems.append("does not decay after its peak")
    if not facts.decays and not all(_close(v, peak) for v in trace[peak_at:]):
        problems.append("does not hold its peak after the warm-up")
    if not problems:
        return []
    return [
        Finding(
            "lr_schedule",
            Severity.ERROR,
            f"the lr over {len(trace)} steps ({', '.join(f'{v:g}' for v in trace)}) " + "; ".join(problems),
            stage="training",
            expected="warm-up to warmup_max_lr, then " + ("decay" if facts.decays else "hold it"),
        )
    ]


def lifecycle_invariants(facts: PreparedFacts) -> list[Finding]:
    return (
        no_placeholder(facts)
        + wraps_engine(facts)
        + world_size_agreement(facts)
        + lr_agreement(facts)
        + lr_schedule(facts)
    )

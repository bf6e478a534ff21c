"""S0 lifecycle invariants over planted facts: each fault alone, and the facts a healthy prepare gives."""

from __future__ import annotations

import dataclasses

import pytest

from ds_doctor.checks.lifecycle import (
    PreparedFacts,
    lifecycle_invariants,
    lr_agreement,
    lr_schedule,
    no_placeholder,
    world_size_agreement,
    wraps_engine,
)

#: What the probe measured on CPU after a healthy prepare at world size 2 (deepspeed 0.19.8, accelerate 1.15).
HEALTHY = PreparedFacts(
    optimizer_class="DeepSpeedOptimizerWrapper",
    optimizer_inner_class="DeepSpeedZeroOptimizer",
    scheduler_class="DeepSpeedSchedulerWrapper",
    scheduler_inner_class="WarmupDecayLR",
    optimizer_wraps_engine=True,
    scheduler_wraps_engine=True,
    num_processes=2,
    dist_world_size=2,
    dp_world_size=2,
    config_lr="auto",
    dummy_lr=1e-3,
    resolved_lr=1e-3,
    warmup_max_lr=1e-3,
    lr_trace=(0.0, 0.0, 1e-3, 1e-3, 7.5e-4, 5e-4),
)


def planted(**changes: object) -> PreparedFacts:
    return dataclasses.replace(HEALTHY, **changes)


def test_healthy_facts_pass_every_invariant() -> None:
    assert lifecycle_invariants(HEALTHY) == []


@pytest.mark.parametrize(
    ("changes", "check", "needle"),
    [
        ({"optimizer_inner_class": "DummyOptim"}, no_placeholder, "DummyOptim survived"),
        (
            {"scheduler_class": "DummyScheduler", "scheduler_inner_class": None},
            no_placeholder,
            "DummyScheduler survived",
        ),
        ({"optimizer_wraps_engine": False}, wraps_engine, "does not wrap engine.optimizer"),
        ({"scheduler_wraps_engine": False}, wraps_engine, "does not wrap engine.lr_scheduler"),
        ({"num_processes": 1}, world_size_agreement, "accelerator.num_processes = 1, dist world size = 2"),
        ({"dp_world_size": 4}, world_size_agreement, "engine.dp_world_size = 4"),
        (
            {
                "config_lr": 1e-3,
                "dummy_lr": 5e-3,
                "warmup_max_lr": 5e-3,
                "lr_trace": (0.0, 5e-3, 5e-3, 2.5e-3),
            },
            lr_agreement,
            "config sets optimizer lr 0.001 but DummyOptim was given lr 0.005",
        ),
        (
            {"lr_trace": (0.0, 2e-3, 1e-3, 5e-4)},
            lr_schedule,
            "peaks at 0.002, not at the configured warmup_max_lr 0.001",
        ),
        ({"lr_trace": (1e-3, 1e-3, 1e-3, 1e-3)}, lr_schedule, "does not warm up"),
        ({"lr_trace": (0.0, 5e-4, 1e-3, 1e-3)}, lr_schedule, "does not decay"),
        ({"lr_trace": (0.0, 1e-3, 5e-4, 8e-4, 1e-4)}, lr_schedule, "does not decay"),
    ],
)
def test_each_planted_fault_is_found_by_its_invariant(changes: dict, check: object, needle: str) -> None:
    facts = planted(**changes)
    findings = check(facts)  # type: ignore[operator]
    assert findings and all(f.is_error for f in findings)
    assert any(needle in f.message for f in findings), [f.message for f in findings]
    assert findings[0] in lifecycle_invariants(facts)


def test_unknowns_are_not_findings() -> None:
    unknown = planted(
        scheduler_wraps_engine=None,
        dist_world_size=None,
        dp_world_size=None,
        warmup_max_lr=None,
        dummy_lr=None,
        lr_trace=(0.0,),
    )
    assert lifecycle_invariants(unknown) == []
    assert lr_agreement(planted(config_lr=1e-3, dummy_lr=1e-3 * (1 + 1e-9))) == []  # equal up to rounding

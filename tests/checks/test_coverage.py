"""S3 coverage invariants, each with a planted fault (the collector they read is tested in
tests/collect/test_tracked.py)."""

from __future__ import annotations

from ds_doctor.checks.coverage import step_changes, tracked_set
from ds_doctor.probes.coverage.subject import FROZEN, INTENDED

BEFORE = {name: 0 for name in INTENDED}


def test_tracked_set_planted_faults() -> None:
    # mosaicml/composer#3493
    composer_like = {**BEFORE, "b.weight": 0, "b.bias": 0, "c.weight": 0, "c.bias": 0}
    added = tracked_set(BEFORE, composer_like, FROZEN)
    assert sorted(f.message.split(" ")[0] for f in added) == ["b.bias", "b.weight", "c.bias", "c.weight"]
    assert all(f.is_error and "is tracked after wrapping" in f.message for f in added)
    dropped = tracked_set({**BEFORE, "c.weight": 0}, BEFORE, FROZEN)  # a frozen parameter dropped on purpose
    assert [(f.severity, f.message.split(" ")[0]) for f in dropped] == [("info", "c.weight")]
    moved = tracked_set(BEFORE, {**BEFORE, "head.bias": 1}, FROZEN)
    assert [f.message for f in moved] == [
        "head.bias moved from param group 0 to 1 when wrapped (its lr / weight decay change)"
    ]


def test_step_changes_planted_faults() -> None:
    assert step_changes(INTENDED, INTENDED) == []
    findings = step_changes(["a.weight", "b.weight"], ["a.weight", "head.weight"])
    assert [f.message for f in findings] == [
        "head.weight should train but one step left it unchanged",
        "b.weight changed in a step although it is not meant to train",
    ]

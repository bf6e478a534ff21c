"""Coverage invariants (S3): which parameters the optimizer tracks, by module name, before and after
a framework wraps the model and the optimizer (`ds_doctor.collect.tracked`), and which of them a step
really changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ds_doctor.collect.tracked import Tracked
from ds_doctor.reports.model import Finding, Severity

REMEDY_ORDER = (
    "Build the optimizer after wrapping, from the wrapped model's parameters (or let Accelerate's prepare "
    "remap it: FSDP1 needs use_orig_params=True for that)."
)


def tracked_set(
    before: Mapping[str, int], after: Mapping[str, int], frozen: Iterable[str], *, stage: str = "after_wrap"
) -> list[Finding]:
    """The optimizer tracks the same parameter names, in the same groups, before and after wrapping.
    A frozen parameter the wrapper dropped on purpose (DeepSpeed ZeRO does) is only an info."""
    frozen = set(frozen)
    findings = []
    for name in sorted(set(before) - set(after)):
        if name in frozen:
            findings.append(
                Finding(
                    "tracked_set",
                    Severity.INFO,
                    f"{name} is frozen and no longer tracked after wrapping (dropped on purpose)",
                    stage=stage,
                )
            )
        else:
            findings.append(
                Finding(
                    "tracked_set",
                    Severity.ERROR,
                    f"{name} was tracked before wrapping and is not after: it will not train",
                    stage=stage,
                    expected="the same names before and after",
                    remedy=REMEDY_ORDER,
                )
            )
    for name in sorted(set(after) - set(before)):
        what = "frozen" if name in frozen else "left out of the optimizer on purpose"
        findings.append(
            Finding(
                "tracked_set",
                Severity.ERROR,
                f"{name} ({what}) is tracked after wrapping: the wrapper added it, and steps will update it",
                stage=stage,
                expected="the same names before and after",
                remedy="Keep several param groups or set requires_grad=False on what must not "
                "train; upgrade the wrapper that rebuilds a single group from model.parameters().",
            )
        )
    for name in sorted(set(before) & set(after)):
        if before[name] != after[name]:
            findings.append(
                Finding(
                    "tracked_set",
                    Severity.ERROR,
                    f"{name} moved from param group {before[name]} to "
                    f"{after[name]} when wrapped (its lr / weight decay change)",
                    stage=stage,
                )
            )
    return findings


def tracked_live(tracked: Tracked, *, stage: str = "after_wrap") -> list[Finding]:
    """Every tensor the optimizer tracks is a live parameter of the wrapped model."""
    return [
        Finding(
            "tracked_live",
            Severity.ERROR,
            f"param group {group} holds a {shape} tensor that is no parameter of the "
            "wrapped model: its steps update an orphan",
            stage=stage,
            expected="every tracked tensor is a live parameter",
            remedy=REMEDY_ORDER,
        )
        for group, shape in tracked.orphans
    ]


def step_changes(
    changed: Iterable[str], intended: Iterable[str], *, stage: str = "after_step"
) -> list[Finding]:
    """After one step exactly the intended parameters changed (values gathered across ranks)."""
    changed, intended = set(changed), set(intended)
    findings = [
        Finding(
            "step_changes",
            Severity.ERROR,
            f"{name} should train but one step left it unchanged",
            stage=stage,
            expected="exactly the optimizer's trainable parameters change",
            remedy=REMEDY_ORDER,
        )
        for name in sorted(intended - changed)
    ]
    findings += [
        Finding(
            "step_changes",
            Severity.ERROR,
            f"{name} changed in a step although it is not meant to train",
            stage=stage,
            expected="exactly the optimizer's trainable parameters change",
        )
        for name in sorted(changed - intended)
    ]
    return findings

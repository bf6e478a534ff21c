"""Equivalence invariants: a wrapped training run computes what plain torch computes, step by step, and a resumed
run holds what the saving run held.

Pure functions over numbers the probe has already reduced (norms of differences, digests of tensors), so they are
tested on constructed sequences and never touch torch. The tolerance formula is documented in docs/invariants.md
("Equivalence"): relative, norm-wise, growing with the number of optimizer steps, from the unit roundoff of the
route's dtype; 0 where the reference performs the route's own operations in the same order.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Mapping, Sequence

from ds_doctor.reports.measures import finite
from ds_doctor.reports.model import Finding, Severity

#: unit roundoff u of each dtype (half the distance from 1.0 to the next value)
UNIT_ROUNDOFF = {"float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}
#: rounding allowed per optimizer step, in units of u (docs/invariants.md derives it): an AdamW step rounds about 8
#: dependent operations per element in each of two implementations
ULPS_PER_STEP = 16
#: the order in which one step's quantities are judged: what goes wrong first shows first
STAGES = ("loss", "grad_norm", "update")
STAGE_WORDS = {
    "loss": "the loss",
    "grad_norm": "the global gradient norm (before clipping)",
    "update": "the parameter after the optimizer step",
}


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """How far a route may be from the reference: relative, norm-wise."""

    dtype: str = "float32"
    exact: bool = False  # the reference performs the route's own operations in the route's order: equality

    def __post_init__(self) -> None:
        if self.dtype not in UNIT_ROUNDOFF:
            raise ValueError(f"no unit roundoff known for {self.dtype!r}; known: {', '.join(UNIT_ROUNDOFF)}")

    def at(self, step: int) -> float:
        """The relative tolerance at `step` (0-based: after step + 1 optimizer steps)."""
        return 0.0 if self.exact else ULPS_PER_STEP * UNIT_ROUNDOFF[self.dtype] * (step + 1)

    def describe(self) -> str:
        if self.exact:
            return "equality (the reference performs the route's own operations in its order)"
        return f"{ULPS_PER_STEP} x u({self.dtype}) x steps = {self.at(0):.3g} per step, relative"


@dataclasses.dataclass(frozen=True)
class Gap:
    """One quantity of one step, route against reference: the size of the difference and of the reference value
    (absolute values for scalars, 2-norms for tensors)."""

    stage: str  # one of STAGES
    name: str  # "loss", "grad_norm", or the parameter's name
    error: float
    scale: float
    route: float | None = None  # the values themselves, for a scalar (the loss, the norm): shown in a finding
    reference: float | None = None
    # absolute, beyond the rounding term: error propagated through the reference's state
    allowance: float = 0.0

    @property
    def relative(self) -> float:
        if self.error == 0:
            return 0.0
        return self.error / self.scale if self.scale > 0 and math.isfinite(self.error) else math.inf

    def allowed(self, tolerance: Tolerance, step: int) -> float:
        """The relative tolerance for this quantity at `step`: the rounding term, plus the propagated allowance
        relative to the reference value (none where the reference is the route's own computation)."""
        if tolerance.exact:
            return 0.0
        extra = self.allowance / self.scale if self.scale > 0 else (math.inf if self.allowance > 0 else 0.0)
        return tolerance.at(step) + extra


@dataclasses.dataclass(frozen=True)
class Divergence:
    """The first quantity over its tolerance: step, stage, name, how far, and how many others at that stage."""

    step: int
    stage: str
    name: str
    relative: float
    tolerance: float
    others: int
    route: float | None = None
    reference: float | None = None

    @property
    def times(self) -> float:
        return self.relative / self.tolerance if self.tolerance > 0 else math.inf


def first_divergence(
    steps: Sequence[Sequence[Gap]], tolerance: Tolerance, stages: Sequence[str] = STAGES
) -> Divergence | None:
    """The earliest step, and in it the earliest stage (of `stages`), with a quantity over the tolerance; within that
    stage the quantity furthest over it (the others over it are counted)."""
    for step, gaps in enumerate(steps):
        for stage in stages:
            over = sorted(
                (g for g in gaps if g.stage == stage and not g.relative <= g.allowed(tolerance, step)),
                key=lambda g: (-_ratio(g.relative, g.allowed(tolerance, step)), g.name),
            )
            if over:
                worst = over[0]
                return Divergence(
                    step,
                    stage,
                    worst.name,
                    worst.relative,
                    worst.allowed(tolerance, step),
                    len(over) - 1,
                    worst.route,
                    worst.reference,
                )
    return None


def _ratio(relative: float, allowed: float) -> float:
    if relative == 0:
        return 0.0
    return relative / allowed if allowed > 0 else math.inf


def worst_ratio(steps: Sequence[Sequence[Gap]], tolerance: Tolerance, stage: str | None = None) -> float:
    """The largest error / tolerance over every step and quantity (of `stage`, or all; 0 when all are equal; inf
    past an exact tolerance): how close a passing route came to failing."""
    return max(
        [
            0.0,
            *(
                _ratio(g.relative, g.allowed(tolerance, step))
                for step, gaps in enumerate(steps)
                for g in gaps
                if stage is None or g.stage == stage
            ),
        ]
    )


def _how_far(d: Divergence) -> str:
    values = (
        f" (route {d.route:.6g}, plain torch {d.reference:.6g})"
        if d.route is not None and d.reference is not None
        else ""
    )
    if d.tolerance > 0:
        return f"{d.relative:.3g} relative{values}, {d.times:.3g}x the tolerance {d.tolerance:.3g}"
    return f"{d.relative:.3g} relative{values} where the reference is bit-for-bit the same computation"


def divergence_data(d: Divergence, step_offset: int = 0) -> dict[str, object]:
    """A divergence as fields: the step (counted from 1), the stage, the quantity, how far and the tolerance (JSON
    holds no NaN or infinity: those are None; the message says what they were)."""
    data: dict[str, object] = {
        "step": step_offset + d.step + 1,
        "stage": d.stage,
        "quantity": d.name,
        "relative_error": finite(d.relative),
        "tolerance": d.tolerance,
        "others_over": d.others,
    }
    if d.route is not None and d.reference is not None:
        data.update(route=finite(d.route), reference=finite(d.reference))
    return data


def divergence_finding(
    divergence: Divergence,
    steps: int,
    setting: str,
    remedy: str | None = None,
    first_update: Divergence | None = None,
) -> Finding:
    """The finding for a route that left the reference: which step, which stage, which parameter, by how much (and,
    where a loss or a norm left it first, where the parameters follow)."""
    d = divergence
    what = STAGE_WORDS[d.stage] + (f" {d.name}" if d.stage == "update" else "")
    others = f"; {d.others} more at this stage over it" if d.others else ""
    follows = ""
    if d.stage != "update":
        u = first_update
        follows = (
            f"; the first parameter over its tolerance: {u.name} after step {u.step + 1} ({_how_far(u)})"
            if u is not None
            else "; no parameter over its tolerance within these steps"
        )
    return Finding(
        "equivalence",
        Severity.ERROR,
        f"step {d.step + 1} of {steps}: {what} diverges from the single-process fp32 reference by "
        f"{_how_far(d)}{others}{follows} ({setting})",
        stage=d.stage,
        expected="every step's loss, gradient norm and parameters within the tolerance of plain torch "
        "on the same global batch (docs/invariants.md)",
        remedy=remedy,
        data={
            **divergence_data(d),
            "steps": steps,
            **(
                {"first_update": divergence_data(first_update)}
                if first_update is not None and d.stage != "update"
                else {}
            ),
        },
    )


def missing_finding(missing: Sequence[str], stage: str, setting: str) -> list[Finding]:
    """Parameters the reference has and the route does not (or the other way round): not comparable, an error."""
    if not missing:
        return []
    return [
        Finding(
            "equivalence",
            Severity.ERROR,
            f"{len(missing)} parameter(s) exist on one side only: "
            f"{', '.join(sorted(missing)[:6])} ({setting})",
            stage=stage,
            expected="the route trains the reference's parameters, under their names",
            data={"missing": sorted(missing)},
        )
    ]


def steps_finding(reference: int, route: int, setting: str, why: str | None = None) -> list[Finding]:
    """The route took another number of optimizer steps than the reference over the same data (a window it never
    stepped, or one it stepped twice; `why`, where the route knows: its DataLoader ran out early): a failed
    invariant, whatever the steps they share show."""
    if reference == route:
        return []
    over = f": {why}" if why else " over the same micro-batches"
    return [
        Finding(
            "equivalence",
            Severity.ERROR,
            f"the route took {route} optimizer step(s) where plain torch takes {reference}{over} ({setting})",
            stage="steps",
            expected="one optimizer step per accumulation window, the short last window of an epoch included",
            data={"reference_steps": reference, "route_steps": route},
        )
    ]


def samples_finding(epochs: Sequence[Sequence[int]], samples: int, setting: str) -> list[Finding]:
    """Each epoch's samples as every rank drew them, against the dataset's `samples`: an epoch that deals a sample
    twice or never (the ranks each shuffled on their own) is a failed invariant, whatever the math of the steps."""
    findings = []
    for epoch, drawn in enumerate(epochs):
        counts = collections.Counter(drawn)
        twice = sorted(i for i, c in counts.items() if c > 1)
        never = sorted(set(range(samples)) - set(counts))
        if twice or never:
            findings.append(
                Finding(
                    "equivalence",
                    Severity.ERROR,
                    f"epoch {epoch}: the ranks drew {len(drawn)} samples of {samples}: {len(twice)} more than once "
                    f"({', '.join(map(str, twice[:8]))}), {len(never)} never ({', '.join(map(str, never[:8]))}) "
                    f"({setting})",
                    stage="data",
                    expected="each epoch's samples dealt once between the ranks (one permutation, sharded)",
                    data={"epoch": epoch, "twice": twice, "never": never},
                )
            )
    return findings


#: what a resume must restore, in the order a finding names them
CATEGORIES = ("parameters", "optimizer state", "lr", "scheduler step", "grad scaler", "rng")

#: one process's state at one point: category -> name -> a value or digest (strings and numbers compare exactly)
Fingerprint = Mapping[str, Mapping[str, object]]


def not_restored(saved: Fingerprint, loaded: Fingerprint, path: str) -> list[Finding]:
    """What the new process holds right after loading, against what the saving process held when it saved: one
    error per category that differs, naming up to five entries and the values where they are short."""
    findings = []
    for category in [c for c in CATEGORIES if c in saved or c in loaded] + sorted(
        set(saved) - set(CATEGORIES)
    ):
        before, after = dict(saved.get(category, {})), dict(loaded.get(category, {}))
        differ = [
            name
            for name in sorted(set(before) | set(after))
            if before.get(name, _ABSENT) != after.get(name, _ABSENT)
        ]
        if not differ:
            continue
        shown = ", ".join(
            _entry(name, before.get(name, _ABSENT), after.get(name, _ABSENT)) for name in differ[:5]
        )
        more = f" and {len(differ) - 5} more" if len(differ) > 5 else ""
        findings.append(
            Finding(
                "resume_restores",
                Severity.ERROR,
                f"{category} not restored by {path}: {len(differ)} of {len(set(before) | set(after))} "
                f"differ after the load from what was saved: {shown}{more}",
                stage="after_load",
                expected="the new process holds, right after the load, what the saving one held",
                data={"category": category, "differ": differ, "compared": len(set(before) | set(after))},
            )
        )
    return findings


_ABSENT = "(absent)"


def _entry(name: str, before: object, after: object) -> str:
    if any(isinstance(v, str) and v.startswith("sha256:") for v in (before, after)):
        return name
    return f"{name} {_short(before)} -> {_short(after)}"


def _short(value: object) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)[:40]


def continuation_finding(
    divergence: Divergence | None, resumed_from: int, steps: int, path: str
) -> list[Finding]:
    """The resumed run's steps against the straight run's: where they part."""
    if divergence is None:
        return []
    d = divergence
    what = STAGE_WORDS[d.stage] + (f" {d.name}" if d.stage == "update" else "")
    return [
        Finding(
            "resume_continues",
            Severity.ERROR,
            f"step {resumed_from + d.step + 1} of {steps} (the first {d.step + 1} after resuming at step "
            f"{resumed_from} through {path}): {what} differs from the uninterrupted run by {_how_far(d)}",
            stage=d.stage,
            expected="a resumed run continues exactly as the uninterrupted one",
            data={**divergence_data(d, resumed_from), "steps": steps, "resumed_from": resumed_from},
        )
    ]


def largest(steps: Sequence[Sequence[Gap]], tolerance: Tolerance) -> dict[str, dict[str, float]]:
    """Per stage, the largest relative difference over all steps and the largest error / tolerance (for the
    report's notes: how close a passing route came)."""
    out: dict[str, dict[str, float]] = {}
    for stage in STAGES:
        gaps = [g for step in steps for g in step if g.stage == stage]
        if gaps:
            ratio = worst_ratio(steps, tolerance, stage)
            out[stage] = {
                "relative": max(g.relative for g in gaps),
                "over_tolerance": ratio if math.isfinite(ratio) else -1.0,
            }
    return out

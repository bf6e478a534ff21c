"""`ds-doctor diff BASELINE NEW`: what changed on a node since its baseline report, and whether it
regressed.

Regressions (exit code 1): a case that was not failing and now fails, errors or times out (or a
new case that does); a new error finding; fewer GPUs, or a GPU with less memory; a measure
(`busbw_gbps`, `algbw_gbps`, `tflops` in a case's notes; higher is better) below the baseline by
more than the tolerance. Everything else that changed is reported and does not fail: outcomes
that got better, new warnings, versions, drivers, hosts, measures that got faster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from doctor.outcomes import FAILING
from reports.model import CaseResult, Report

MEASURES = ("busbw_gbps", "algbw_gbps", "tflops")
DEFAULT_TOLERANCE_PCT = 10.0


@dataclasses.dataclass(frozen=True)
class Change:
    kind: str  # outcome, finding, case, version, hardware, measure
    subject: str  # a case id, a package, a GPU, ...
    before: Any
    after: Any
    regression: bool
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Diff:
    baseline: str  # "host @ started_at" of each report
    new: str
    tolerance_pct: float
    changes: tuple[Change, ...]

    @property
    def regressions(self) -> list[Change]:
        return [c for c in self.changes if c.regression]

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "new": self.new, "tolerance_pct": self.tolerance_pct,
                "regressed": bool(self.regressions), "changes": [c.to_dict() for c in self.changes]}


def _label(report: Report) -> str:
    return f"{report.hardware.get('host')} @ {report.started_at}"


def outcome_changes(base: Mapping[str, CaseResult], new: Mapping[str, CaseResult]) -> list[Change]:
    changes = []
    for case, result in new.items():
        before = base.get(case)
        if before is None:
            if result.outcome in FAILING:
                changes.append(Change("outcome", case, None, result.outcome.value, True,
                                      f"new case, {result.outcome.value}: {result.reason or ''}".rstrip(": ")))
            else:
                changes.append(Change("case", case, None, result.outcome.value, False, "new case"))
        elif before.outcome != result.outcome:
            regression = result.outcome in FAILING and before.outcome not in FAILING
            changes.append(Change("outcome", case, before.outcome.value, result.outcome.value, regression,
                                  result.reason or ""))
    for case, result in base.items():
        if case not in new:
            changes.append(Change("case", case, result.outcome.value, None, False, "not in the new run"))
    return changes


def _finding_keys(result: CaseResult) -> dict[tuple[str, str], str]:
    return {(f.invariant, f.severity): f.message for f in result.findings}


def finding_changes(base: Mapping[str, CaseResult], new: Mapping[str, CaseResult]) -> list[Change]:
    """Findings (by case, invariant and severity) the baseline did not have."""
    changes = []
    for case, result in new.items():
        before = _finding_keys(base[case]) if case in base else {}
        for (invariant, severity), message in _finding_keys(result).items():
            if (invariant, severity) not in before:
                changes.append(Change("finding", case, None, f"{severity} {invariant}", severity == "error", message))
    return changes


def version_changes(base: Report, new: Report) -> list[Change]:
    changes = []
    before = {**(base.env.get("packages") or {}), **{k: base.env.get(k) for k in ("python", "cuda", "nccl")}}
    after = {**(new.env.get("packages") or {}), **{k: new.env.get(k) for k in ("python", "cuda", "nccl")}}
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            changes.append(Change("version", name, before.get(name), after.get(name), False))
    return changes


def hardware_changes(base: Report, new: Report) -> list[Change]:
    changes = []
    for key, label in (("driver", "driver"), ("cuda_driver", "CUDA driver")):
        if base.env.get(key) != new.env.get(key):
            changes.append(Change("hardware", label, base.env.get(key), new.env.get(key), False))
    if base.hardware.get("host") != new.hardware.get("host"):
        changes.append(Change("hardware", "host", base.hardware.get("host"), new.hardware.get("host"), False,
                              "the reports come from different hosts"))
    gpus_before, gpus_after = base.hardware.get("gpus") or [], new.hardware.get("gpus") or []
    if len(gpus_before) != len(gpus_after):
        changes.append(Change("hardware", "GPU count", len(gpus_before), len(gpus_after),
                              len(gpus_after) < len(gpus_before), new.hardware.get("gpus_reason") or ""))
    for before, after in zip(gpus_before, gpus_after, strict=False):
        gpu = f"GPU {after.get('index')}"
        if before.get("name") != after.get("name"):
            changes.append(Change("hardware", f"{gpu} model", before.get("name"), after.get("name"), False))
        if before.get("uuid") != after.get("uuid"):
            changes.append(Change("hardware", f"{gpu} UUID", before.get("uuid"), after.get("uuid"), False,
                                  "a different board in this slot"))
        total_before, total_after = before.get("memory_total_bytes"), after.get("memory_total_bytes")
        if total_before is not None and total_after is not None and total_before != total_after:
            changes.append(Change("hardware", f"{gpu} memory", total_before, total_after, total_after < total_before))
    return changes


def measure_changes(base: Mapping[str, CaseResult], new: Mapping[str, CaseResult], tolerance_pct: float) -> list[Change]:
    """Higher is better for every measure; below the baseline by more than the tolerance regresses."""
    changes = []
    for case, result in new.items():
        if case not in base:
            continue
        for measure in MEASURES:
            before, after = base[case].notes.get(measure), result.notes.get(measure)
            if not isinstance(before, (int, float)) or not isinstance(after, (int, float)) or before <= 0:
                continue
            delta_pct = (after - before) / before * 100
            if abs(delta_pct) > tolerance_pct:
                changes.append(Change("measure", f"{case} {measure}", before, after, delta_pct < 0,
                                      f"{delta_pct:+.1f}% (tolerance {tolerance_pct:g}%)"))
    return changes


def diff_reports(base: Report, new: Report, tolerance_pct: float = DEFAULT_TOLERANCE_PCT) -> Diff:
    if not 0 <= tolerance_pct < 100:
        raise ValueError(f"tolerance must be in [0, 100) percent, got {tolerance_pct}")
    before = {r.case: r for r in base.results}
    after = {r.case: r for r in new.results}
    changes = [
        *outcome_changes(before, after), *finding_changes(before, after), *measure_changes(before, after, tolerance_pct),
        *hardware_changes(base, new), *version_changes(base, new),
    ]
    return Diff(_label(base), _label(new), tolerance_pct, tuple(changes))


KIND_TITLES = (("outcome", "Outcome changes"), ("case", "Cases added or gone"), ("finding", "New findings"),
               ("measure", "Bandwidth and TFLOP/s beyond the tolerance"), ("hardware", "Hardware changes"),
               ("version", "Version changes"))


def _cell(value: Any) -> str:
    return "-" if value is None else str(value).replace("|", "\\|").replace("\n", " ")


def render_diff(diff: Diff) -> str:
    """Markdown (also read as plain text on a console)."""
    verdict = f"**REGRESSED**: {len(diff.regressions)} regression(s)" if diff.regressions else "no regression"
    lines = [f"# ds-doctor diff: {verdict}", "", f"- baseline: {diff.baseline}", f"- new: {diff.new}",
             f"- tolerance: {diff.tolerance_pct:g}%", ""]
    if not diff.changes:
        lines += ["Nothing changed.", ""]
    for kind, title in KIND_TITLES:
        rows = [c for c in diff.changes if c.kind == kind]
        if not rows:
            continue
        lines += [f"## {title}", "", "| | what | before | after | detail |", "|---|---|---|---|---|"]
        lines += [f"| {'REGRESSION' if c.regression else ''} | {_cell(c.subject)} | {_cell(c.before)} | "
                  f"{_cell(c.after)} | {_cell(c.detail)} |" for c in rows]
        lines.append("")
    return "\n".join(lines)

"""`ds-doctor diff` output: what changed between a node's baseline report and a new one, as plain data and Markdown
(every string from the reports put through `ds_doctor.reports.safe`, as in the report's Markdown)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ds_doctor.reports.safe import md_cell, md_text


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
        return {
            "baseline": self.baseline,
            "new": self.new,
            "tolerance_pct": self.tolerance_pct,
            "regressed": bool(self.regressions),
            "changes": [c.to_dict() for c in self.changes],
        }


KIND_TITLES = (
    ("outcome", "Outcome changes"),
    ("case", "Cases added or gone"),
    ("finding", "New findings"),
    ("measure", "Bandwidth and TFLOP/s beyond the tolerance"),
    ("hardware", "Hardware changes"),
    ("version", "Version changes"),
)


def _cell(value: Any) -> str:
    return "-" if value is None else md_cell(value)


def render_diff(diff: Diff) -> str:
    """Markdown (also read as plain text on a console)."""
    verdict = f"**REGRESSED**: {len(diff.regressions)} regression(s)" if diff.regressions else "no regression"
    lines = [
        f"# ds-doctor diff: {verdict}",
        "",
        f"- baseline: {md_text(diff.baseline)}",
        f"- new: {md_text(diff.new)}",
        f"- tolerance: {diff.tolerance_pct:g}%",
        "",
    ]
    if not diff.changes:
        lines += ["Nothing changed.", ""]
    for kind, title in KIND_TITLES:
        rows = [c for c in diff.changes if c.kind == kind]
        if not rows:
            continue
        lines += [f"## {title}", "", "| | what | before | after | detail |", "|---|---|---|---|---|"]
        lines += [
            f"| {'REGRESSION' if c.regression else ''} | {_cell(c.subject)} | {_cell(c.before)} | "
            f"{_cell(c.after)} | {_cell(c.detail)} |"
            for c in rows
        ]
        lines.append("")
    return "\n".join(lines)

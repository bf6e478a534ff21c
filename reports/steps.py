"""The equivalence family's steps, read back from a case's notes: loss and gradient norm of the route and of the
reference at each optimizer step, and how far apart they are. The Markdown shows them as a table in a case that needs
a look, the HTML report as a picture."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ds_doctor.reports.records import CaseResult

QUANTITIES = ("loss", "grad_norm")


@dataclasses.dataclass(frozen=True)
class Pair:
    route: float
    reference: float

    @property
    def relative(self) -> float:
        """|route - reference| / |reference|: inf where only the reference is 0, nan where either is nan."""
        gap = abs(self.route - self.reference)
        if self.reference == 0:
            return 0.0 if gap == 0 else math.inf
        return gap / abs(self.reference)


@dataclasses.dataclass(frozen=True)
class Step:
    number: int  # 1-based, as the findings count steps
    values: dict[str, Pair]  # quantity -> the route's and the reference's value


def _number(value: Any) -> float | None:
    """`value` as a float, or None where it is none: a bool is a flag, not a loss, and an integer past a float's
    range (a report's notes are free-form JSON, which reads 1e400 written out in digits as an int) makes `float()`
    raise. NaN and infinity stay: a NaN loss is what the table has to show (the chart leaves it out)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _pair(value: Any) -> Pair | None:
    if not isinstance(value, dict):
        return None
    route, reference = _number(value.get("route")), _number(value.get("reference"))
    if route is None or reference is None:
        return None
    return Pair(route, reference)


def steps_of(result: CaseResult) -> tuple[str, list[Step]]:
    """The tolerance as the probe stated it, and each step's values; ("", []) for a case with none."""
    notes = result.notes.get("equivalence")
    if not isinstance(notes, dict) or not isinstance(notes.get("steps"), list):
        return "", []
    steps = []
    for number, row in enumerate(notes["steps"], start=1):
        if isinstance(row, dict):
            pairs = {q: pair for q in QUANTITIES if (pair := _pair(row.get(q))) is not None}
            if pairs:
                steps.append(Step(number, pairs))
    return str(notes.get("tolerance") or ""), steps

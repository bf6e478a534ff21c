"""Reading reports of an older schema version: where version 1 kept what a newer one keeps elsewhere."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: How a version-1 report's notes name what version 2 keeps in `measures` and `series`.
V1_NOTES = {
    "busbw_gbps": "busbw_gbps",
    "algbw_gbps": "algbw_gbps",
    "tflops": "tflops",
    "size": "matmul_size",
    "relative_error": "relative_error",
    "tolerance": "error_tolerance",
}


def measures_from_v1_notes(
    notes: dict[str, Any],
) -> tuple[dict[str, float], list[dict[str, float]], dict[str, Any]]:
    measures = {
        new: notes.pop(old) for old, new in V1_NOTES.items() if isinstance(notes.get(old), (int, float))
    }
    sizes = notes.pop("sizes", None)
    series = [dict(row) for row in sizes if isinstance(row, dict)] if isinstance(sizes, list) else []
    return measures, series, notes


#: The notes the Markdown showed by name before probes marked theirs (`ctx.note(..., shown=True)`): a report
#: written then still shows them.
LEGACY_SHOWN_NOTES = (
    "route",
    "ordering",
    "route_refused",
    "tracked_before",
    "tracked_after",
    "changed_by_step",
)


def legacy_shown_notes(notes: Mapping[str, Any]) -> tuple[str, ...]:
    """The notes a report written before `shown_notes` showed."""
    return tuple(key for key in LEGACY_SHOWN_NOTES if key in notes)

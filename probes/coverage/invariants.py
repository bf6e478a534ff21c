"""The optimizer-coverage family's own judgement, beside the coverage invariants of `ds_doctor.plugins.checks`
(`tracked_set`, `tracked_live`, `step_changes`): what the optimizer tracks over every rank, and what one step
changed."""

from __future__ import annotations

from typing import Any

from ds_doctor.plugins import ProbeContext
from ds_doctor.plugins.collect import Tracked


def tracked_everywhere(ctx: ProbeContext, tracked: Tracked) -> Tracked:
    """A FlatParameter shard holds some names on each rank: the union over ranks is what is tracked."""
    groups: dict[str, int] = {}
    for rank_groups in ctx.all_gather_json(tracked.groups):
        groups.update(rank_groups)
    return Tracked(groups, tracked.orphans)  # orphans are this rank's own


def changed_by_step(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The parameters (by original name) whose full value differs after the step, sorted."""
    return sorted(name for name, value in after.items() if not _equal(before[name], value))


def _equal(a: Any, b: Any) -> bool:
    import torch

    return a.shape == b.shape and torch.equal(a, b)

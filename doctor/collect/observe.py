"""Observers that wrap a library method for a probe's duration and record what it really touches.

They call the real method unchanged; they only look at its operands first (metadata only).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from ds_doctor.collect.devicemap import Recorder, is_zero3_optimizer
from ds_doctor.reports.model import TensorRecord

CLIP_STAGE = "at_clip"


def record_clip_call(rec: Recorder, optimizer: Any, call: int, arguments: dict[str, Any]) -> None:
    """Operands of one ZeRO `unscale_and_clip_grads` call, and the fp32 partitions they belong to."""
    prefix = f"unscale_and_clip_grads[{call}]"
    if is_zero3_optimizer(optimizer):
        index = int(arguments["sub_group_id"])
        partition = optimizer.fp32_partitioned_groups_flat[index]
        grads: list[tuple[str | None, Any, Any]] = [
            (f"optimizer.fp32_partitioned_groups_flat[{index}]", partition, partition.grad)
        ]
    else:
        grads = []
        flat = [
            g for item in arguments["grad_groups_flat"] for g in (item if isinstance(item, list) else [item])
        ]
        for grad in flat:
            found = next(
                ((i, p) for i, p in enumerate(optimizer.single_partition_of_fp32_groups) if p.grad is grad),
                (None, None),
            )
            path = f"optimizer.single_partition_of_fp32_groups[{found[0]}]" if found[0] is not None else None
            grads.append((path, found[1], grad))
    for j, (path, partition, grad) in enumerate(grads):
        if partition is not None and path is not None:
            rec.add(partition, role="fp32_partition", path=path)
            if grad is not None:
                rec.add(grad, role="fp32_partition_grad", path=f"{path}.grad", owner=path)
        if grad is not None:
            rec.add(grad, role="clip_operand", path=f"{prefix}.grads[{j}]", owner=path)
    rec.add(arguments.get("total_norm"), role="clip_operand", path=f"{prefix}.total_norm")
    rec.add(getattr(optimizer, "loss_scale", None), role="clip_operand", path=f"{prefix}.loss_scale")


@contextlib.contextmanager
def observe_unscale_and_clip(
    optimizer: Any, rank: int, sink: Callable[[list[TensorRecord]], None]
) -> Iterator[list[int]]:
    """Wrap `optimizer.unscale_and_clip_grads`; each call's records go to `sink` before it runs.

    Yields a one-element list holding the number of calls so far.
    """
    original = optimizer.unscale_and_clip_grads
    had_own = "unscale_and_clip_grads" in vars(optimizer)
    # Bound by position: DeepSpeed decorates the stage-3 method, hiding its signature.
    names = (
        ("sub_group_id", "total_norm")
        if is_zero3_optimizer(optimizer)
        else ("grad_groups_flat", "total_norm")
    )
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = calls[0]
        calls[0] += 1
        rec = Recorder(rank, CLIP_STAGE)
        record_clip_call(rec, optimizer, call, {**dict(zip(names, args, strict=False)), **kwargs})
        sink(rec.records)
        return original(*args, **kwargs)

    optimizer.unscale_and_clip_grads = wrapper
    try:
        yield calls
    finally:
        if had_own:
            optimizer.unscale_and_clip_grads = original
        else:
            del optimizer.unscale_and_clip_grads

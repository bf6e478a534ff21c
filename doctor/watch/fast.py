"""The device-map invariants on a Recorder's rows, for a check inside a job.

Each function first finds, on rows (tensor, role, path, owner, aliases, device), the few rows that could break
its invariant, makes records of those only, and hands them to the invariant of `ds_doctor.checks` itself. Findings
are the same as on a full device map (the invariants judge offenders and their anchors alone); the cost is a
dict lookup and a string comparison per tensor, not a record.

`scan` goes one step further for the watch's step moment: no rows at all, one pass over the module and the
optimizer that reads each tensor's device and compares it where it is read. Where nothing can break an invariant
it returns how many rows a collection would have made; anything else goes back to the rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ds_doctor.checks.identity import no_meta_params
from ds_doctor.checks.placement import ANCHOR_ROLES, ZeroPromise, check_placement, optimizer_state_colocation
from ds_doctor.checks.structure import buffer_placement, same_device
from ds_doctor.collect.devicemap import (
    Recorder,
    Row,
    _plain_tree,
    device_name,
    is_zero3_optimizer,
    is_zero12_optimizer,
    iter_nested_tensors,
    unwrap_optimizer,
)
from ds_doctor.reports.model import Finding, Severity

_OPTIMIZER_ROLES = ("optim_state", "optim_group_tensor")


def _anchors(rows: Iterable[Row]) -> dict[str, Row]:
    """Path -> the row an optimizer tensor owned by that path is held against (the last of a path, as a device
    map's records are looked up); a ZeRO-3 `ds_tensor` row's tuple path is joined as its record's is."""
    return {
        (row[2] if isinstance(row[2], str) else "".join(map(str, row[2]))): row
        for row in rows
        if row[1] in ANCHOR_ROLES
    }


def colocation(rec: Recorder) -> list[Finding]:
    """`optimizer_state_colocation` on the optimizer rows whose device is not their owner's, and those owners."""
    rows = rec.rows
    anchors = _anchors(rows)
    # no anchor: the row is held against itself; a 0-dim CPU state (AdamW's step) is exempt
    offenders = [
        row
        for row in rows
        if row[1] in _OPTIMIZER_ROLES
        and anchors.get(row[3] or "", row)[5] != row[5]
        and not (
            row[1] == "optim_state"
            and row[5] in ("cpu", "python")
            and (row[5] == "python" or row[0].dim() == 0)
        )
    ]
    if not offenders:
        return []
    owners = {row[3] or "" for row in offenders}
    held = [row for path, row in anchors.items() if path in owners]
    return optimizer_state_colocation(rec.materialize([*offenders, *held]))


#: Findings of one invariant a moment reports one by one on a rank; the rest are one finding that names them.
LIMIT = 10


def meta_params(rec: Recorder) -> list[Finding]:
    """`no_meta_params` on the parameter rows on `meta`: the first LIMIT one by one, the rest (a whole model
    dispatched to meta has thousands) in one finding that counts and names them."""
    rows = [row for row in rec.rows if row[1] == "param" and row[5] == "meta"]
    findings = no_meta_params(rec.materialize(rows[:LIMIT]))
    if len(rows) > LIMIT:
        more = [row[2] for row in rows[LIMIT:]]
        listed = ", ".join(more[:20]) + (", ..." if len(more) > 20 else "")
        findings.append(
            Finding(
                "no_meta_params",
                Severity.ERROR,
                f"{len(more)} more parameters are on meta at {rec.stage}: {listed}",
                rec.rank,
                rec.stage,
                findings[0].expected,
                remedy=findings[0].remedy,
            )
        )
    return findings


def buffers_off(rec: Recorder, device: str) -> list[Finding]:
    """`buffer_placement` on the buffer rows that are not on `device` (its own rule for `cuda` vs `cuda:0`)."""
    rows = [row for row in rec.rows if row[1] == "buffer" and not same_device(row[5], device)]
    return buffer_placement(rec.materialize(rows), device, rec.stage)


def zero_placement(rec: Recorder, promise: ZeroPromise) -> list[Finding]:
    """fp32 partitions on the optimizer's promised device, ZeRO-3 parameter partitions on theirs (with offload)."""
    wrong_fp32 = [r for r in rec.rows if r[1] == "fp32_partition" and r[5] != promise.optimizer_device]
    findings = check_placement(
        rec.materialize(wrong_fp32),
        roles=("fp32_partition",),
        expected=promise.optimizer_device,
        invariant="fp32_partition_placement",
        what="fp32 partition(s)",
    )
    if promise.offload_param:
        wrong = [r for r in rec.rows if r[1] == "param_partition" and r[5] != promise.param_partition_device]
        findings += check_placement(
            rec.materialize(wrong),
            roles=("param_partition",),
            expected=promise.param_partition_device,
            invariant="param_partition_placement",
            what="parameter partition(s)",
        )
    return findings


#: Values that hold no tensor (a bool is an int): skipped as the collectors skip them.
_SCALARS = (str, bytes, int, float, type(None))


def scan(module: Any, optimizer: Any) -> int | None:
    """How many rows `collect_rows(rec, module=module, optimizer=optimizer)` would make, where none of them can
    break `optimizer_state_colocation`, `fp32_partition_placement` or `param_partition_placement` (whatever a ZeRO
    config promises); None where the rows must judge.

    It reads what the collectors read (every parameter once, its gradient, every buffer once, the optimizer's
    group tensors and per-parameter state) in one pass, and compares each optimizer tensor's device, where it is
    read, with the device of the parameter it is kept for: its owner, whose row is the anchor `colocation` looks
    up. None (the rows judge, with the same findings as ever) at the first tensor that is not with its parameter,
    and wherever the owner or the anchor would not be that parameter: a ZeRO optimizer or a ZeRO-3 partition, a
    module that names its own parameters (FSDP1's root), optimizer state or a group tensor kept for a tensor the
    module does not hold. No names are made: the step moment needs them only for what it finds.
    """
    if module is None or not _plain_tree(module):
        return None
    if optimizer is not None:
        optimizer = unwrap_optimizer(optimizer)
        if is_zero3_optimizer(optimizer) or is_zero12_optimizer(optimizer):
            return None
    params, buffers = _held(module)
    # the module's parameters now, each once (all alive: their ids are theirs alone)
    live = {id(param): param for param in params}
    rows = _module_rows(live, buffers)
    if rows is None or optimizer is None:
        return rows
    groups = _group_rows(optimizer, live)
    state = None if groups is None else _state_rows(optimizer, live)
    return None if groups is None or state is None else rows + groups + state


def _held(module: Any) -> tuple[list[Any], list[Any]]:
    """Every parameter and buffer of the module tree, as `named_tensors` walks it, without names."""
    params: list[Any] = []
    buffers: list[Any] = []
    stack = [module]
    while stack:
        current = stack.pop()
        if current is None:  # a registered None child
            continue
        own = current.__dict__
        held = own.get("_parameters")
        if held:
            params.extend(held.values())
        held = own.get("_buffers")
        if held:
            buffers.extend(held.values())
        held = own.get("_modules")
        if held:
            stack.extend(held.values())
    return [p for p in params if p is not None], [b for b in buffers if b is not None]


def _module_rows(live: dict[int, Any], buffers: list[Any]) -> int | None:
    """Parameters, gradients and buffers (each once, a number as `python`); None with a ZeRO-3 partition."""
    grads = 0
    for param in live.values():
        if param.__dict__.get("ds_tensor") is not None:
            return None
        if param.grad is not None:
            grads += 1
    distinct = {id(buffer): buffer for buffer in buffers}
    return len(live) + grads + sum(device_name(buffer) is not None for buffer in distinct.values())


def _group_rows(optimizer: Any, live: dict[int, Any]) -> int | None:
    """Tensors kept in `param_groups`, each with the group's first parameter (no exemption)."""
    count = 0
    for group in optimizer.param_groups:
        params = group.get("params", [])
        first = params[0] if params else None
        for key, value in group.items():
            if key == "params" or isinstance(value, (str, bool, int, float, type(None))):
                continue
            for _, tensor in iter_nested_tensors(value, ""):
                count += 1
                if first is None or id(first) not in live or tensor.device != first.device:
                    return None
    return count


def _state_rows(optimizer: Any, live: dict[int, Any]) -> int | None:
    """Per-parameter state, each tensor with its parameter. A 0-dim CPU tensor is exempt, as in `colocation` (a
    tensor's device is `cpu`, as text, exactly where it equals torch.device("cpu"): CPU tensors have no index)."""
    import torch

    tensor_type, cpu = torch.Tensor, torch.device("cpu")
    count = 0
    for param, held in optimizer.state.items():
        if not held:
            continue
        if id(param) not in live:  # owned by its place in the groups, or untracked: not this scan's anchor
            return None
        anchor = param.device
        for value in held.values():
            if isinstance(value, tensor_type):
                count += 1
                device = value.device
                if device != anchor and not (device == cpu and value.dim() == 0):
                    return None
            elif not isinstance(value, _SCALARS):
                nested = [tensor for _, tensor in iter_nested_tensors(value, "")]
                count += len(nested)
                if any(t.device != anchor and not (t.device == cpu and t.dim() == 0) for t in nested):
                    return None
    return count

"""The device-map invariants on a Recorder's rows, for a check inside a job.

Each function first finds, on rows (tensor, role, path, owner, aliases, device), the few rows that could break
its invariant, makes records of those only, and hands them to the invariant of `doctor.checks` itself. Findings
are the same as on a full device map (the invariants judge offenders and their anchors alone); the cost is a
dict lookup and a string comparison per tensor, not a record.
"""

from __future__ import annotations

from doctor.checks.identity import no_meta_params
from doctor.checks.placement import ANCHOR_ROLES, ZeroPromise, check_placement, optimizer_state_colocation
from doctor.checks.structure import buffer_placement, same_device
from doctor.collect.devicemap import Recorder, Row
from reports.records import Finding

_OPTIMIZER_ROLES = ("optim_state", "optim_group_tensor")


def _text(path: object) -> str:
    return path if isinstance(path, str) else "".join(map(str, path))  # type: ignore[arg-type]


def colocation(rec: Recorder) -> list[Finding]:
    """`optimizer_state_colocation` on the optimizer rows whose device is not their owner's, and those owners."""
    anchors: dict[str, Row] = {}
    for row in rec.rows:
        if row[1] in ANCHOR_ROLES:
            anchors[_text(row[2])] = row
    offenders: list[Row] = []
    owners: dict[str, Row] = {}
    for row in rec.rows:
        if row[1] not in _OPTIMIZER_ROLES:
            continue
        anchor = anchors.get(row[3] or "")
        if anchor is None or anchor[5] == row[5]:
            continue
        if row[1] == "optim_state" and (row[5] == "python" or (row[5] == "cpu" and row[0].dim() == 0)):
            continue  # a 0-dim CPU state (AdamW's step) mixes with any device: exempt, as in the invariant
        offenders.append(row)
        owners[row[3] or ""] = anchor
    if not offenders:
        return []
    return optimizer_state_colocation(rec.materialize([*offenders, *owners.values()]))


def meta_params(rec: Recorder) -> list[Finding]:
    """`no_meta_params` on the parameter rows on `meta`."""
    return no_meta_params(rec.materialize(row for row in rec.rows if row[1] == "param" and row[5] == "meta"))


def buffers_off(rec: Recorder, device: str) -> list[Finding]:
    """`buffer_placement` on the buffer rows that are not on `device` (its own rule for `cuda` vs `cuda:0`)."""
    rows = [row for row in rec.rows if row[1] == "buffer" and not same_device(row[5], device)]
    return buffer_placement(rec.materialize(rows), device, rec.stage)


def zero_placement(rec: Recorder, promise: ZeroPromise) -> list[Finding]:
    """fp32 partitions on the optimizer's promised device, ZeRO-3 parameter partitions on theirs (with offload)."""
    wrong_fp32 = [r for r in rec.rows if r[1] == "fp32_partition" and r[5] != promise.optimizer_device]
    findings = check_placement(rec.materialize(wrong_fp32), roles=("fp32_partition",),
                               expected=promise.optimizer_device, invariant="fp32_partition_placement",
                               what="fp32 partition(s)")
    if promise.offload_param:
        wrong = [r for r in rec.rows if r[1] == "param_partition" and r[5] != promise.param_partition_device]
        findings += check_placement(rec.materialize(wrong), roles=("param_partition",),
                                    expected=promise.param_partition_device, invariant="param_partition_placement",
                                    what="parameter partition(s)")
    return findings

"""The device-map invariants on a Recorder's rows, for a check inside a job.

Each function first finds, on rows (tensor, role, path, owner, aliases, device), the few rows that could break
its invariant, makes records of those only, and hands them to the invariant of `ds_doctor.checks` itself. Findings
are the same as on a full device map (the invariants judge offenders and their anchors alone); the cost is a
dict lookup and a string comparison per tensor, not a record.
"""

from __future__ import annotations

from ds_doctor.checks.identity import no_meta_params
from ds_doctor.checks.placement import ANCHOR_ROLES, ZeroPromise, check_placement, optimizer_state_colocation
from ds_doctor.checks.structure import buffer_placement, same_device
from ds_doctor.collect.devicemap import Recorder
from ds_doctor.reports.records import Finding, Severity

_OPTIMIZER_ROLES = ("optim_state", "optim_group_tensor")


def colocation(rec: Recorder) -> list[Finding]:
    """`optimizer_state_colocation` on the optimizer rows whose device is not their owner's, and those owners.

    Anchors are keyed by text paths only: a ZeRO-3 `ds_tensor` row (a tuple path) is never an optimizer owner."""
    rows = rec.rows
    device_of = {row[2]: row[5] for row in rows if row[1] in ANCHOR_ROLES and isinstance(row[2], str)}
    # a 0-dim CPU state (AdamW's step) is exempt
    offenders = [
        row
        for row in rows
        if row[1] in _OPTIMIZER_ROLES
        and (device_of.get(row[3], row[5]) if row[3] is not None else row[5]) != row[5]
        and not (
            row[1] == "optim_state"
            and row[5] in ("cpu", "python")
            and (row[5] == "python" or row[0].dim() == 0)
        )
    ]
    if not offenders:
        return []
    owners = {row[3] for row in offenders}
    anchors = {row[2]: row for row in rows if row[1] in ANCHOR_ROLES and row[2] in owners}
    return optimizer_state_colocation(rec.materialize([*offenders, *anchors.values()]))


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

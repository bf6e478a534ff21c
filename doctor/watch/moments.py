"""What a watch checks at each moment of a job, on one rank: pure functions of a `Target` returning findings.

Metadata only (devices, dtypes, shapes, identities): no tensor op is dispatched, so a moment is safe and cheap
at any model size (bench/bench_collect.py). Each moment is a `Check`: its findings, the rows it looked at, and
the ties and fp32 partitions a later moment compares against.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ds_doctor.checks.identity import optimizer_params_live, param_name_map
from ds_doctor.checks.lifecycle import placeholders_among, process_count_agreement
from ds_doctor.checks.placement import ZeroPromise, boundary_grads, clip_norm_device, grad_accum_dtype
from ds_doctor.checks.structure import ties_kept
from ds_doctor.collect.devicemap import Recorder, by_tensor, collect_rows, named_tensors
from ds_doctor.collect.tracked import optimizer_groups
from ds_doctor.reports.model import Finding, Severity, TensorRecord
from ds_doctor.watch import fast
from ds_doctor.watch.target import Target, prepared_classes

#: Per moment, the invariants it is there for, first first: a moment's known issue is the one of the first broken.
PRIMARY = {
    "after_prepare": (
        "no_placeholder",
        "optimizer_params_live",
        "fp32_partition_placement",
        "param_partition_placement",
    ),
    "step": (
        "clip_norm_device",
        "boundary_grad_matches_partition",
        "optimizer_state_colocation",
        "replicas_agree",
    ),
    "before_save": ("param_name_map", "optimizer_params_live", "no_meta_params"),
    "after_load": ("optimizer_state_colocation", "optimizer_params_live", "ties_kept", "buffer_placement"),
}

#: The moments, the scenario each one guards, and what it looks for.
MOMENTS = {
    "after_prepare": ("S0", "placeholders, optimizer coverage, placement against the config, buffers"),
    "step": (
        "S2",
        "ZeRO placement, optimizer state with its parameters, the clip operands, data-parallel replicas bit for bit",
    ),
    "before_save": ("S1", "every parameter in the checkpoint's name map (frozen first), nothing on meta"),
    "after_load": (
        "S4",
        "optimizer tensors with their parameters, the optimizer on live parameters, buffers, ties",
    ),
}


@dataclasses.dataclass
class Check:
    findings: list[Finding]
    records: int  # rows looked at on this rank
    device_map: list[TensorRecord] = dataclasses.field(default_factory=list)  # the rows as records, if asked


def _snapshot(target: Target, rank: int, stage: str) -> Recorder:
    rec = Recorder(rank, stage)
    collect_rows(rec, module=target.module, optimizer=target.optimizer)
    return rec


def _promise(target: Target) -> ZeroPromise | None:
    config = target.config
    if not config or "zero_optimization" not in config:
        return None
    return ZeroPromise.from_config(config, accelerator=target.device)


def placeholders(target: Target, rank: int, stage: str) -> list[Finding]:
    """S0: no DummyOptim / DummyScheduler survived prepare (the job holds a placeholder, not DeepSpeed's object)."""
    return placeholders_among(prepared_classes(target.prepared), rank=rank, stage=stage)


def _coverage(target: Target, rank: int, stage: str, rec: Recorder | None = None) -> list[Finding]:
    """S3's check on the job: the optimizer holds every trainable parameter and nothing else. With `rec`, the
    parameters are its rows (one per tensor) rather than another walk of the module."""
    if rec is not None:
        params = [(row[2], row[0]) for row in rec.rows if row[1] == "param"]
    else:
        params = [(name, param) for name, param, _ in by_tensor(named_tensors(target.module)[0])]
    return optimizer_params_live(
        params, [p for group in optimizer_groups(target.optimizer) for p in group], rank=rank, stage=stage
    )


def after_prepare(target: Target, rank: int, keep_map: bool = False) -> Check:
    stage = "after_prepare"
    rec = _snapshot(target, rank, stage)
    findings = placeholders(target, rank, stage) + _coverage(target, rank, stage, rec) + fast.meta_params(rec)
    findings += fast.buffers_off(rec, target.device) + fast.colocation(rec)
    findings += _process_count(target, stage)
    promise = _promise(target)
    if promise is not None:
        findings += fast.zero_placement(rec, promise) + grad_accum_dtype(promise)
    return Check(findings, len(rec), rec.records if keep_map else [])


def _process_count(target: Target, stage: str) -> list[Finding]:
    """Accelerate's count of processes against the process group's (on CPU under torchrun, an Accelerator built
    without a backend runs each rank alone: every rank is the main process and writes the same checkpoint)."""
    if target.num_processes is None:
        return []
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else None
    dp = getattr(target.engine, "dp_world_size", None) if target.engine is not None else None
    return process_count_agreement(target.num_processes, world, dp, stage=stage)


def step(
    target: Target,
    rank: int,
    label: str,
    clip: list[TensorRecord],
    initial: list[TensorRecord],
    keep_map: bool = False,
) -> Check:
    """After an optimizer step; `clip` holds what unscale_and_clip_grads saw in it, `initial` the fp32
    partitions at after_prepare (every one must have reached the clip).

    The placement checks run while the module and the optimizer are read (`fast.scan`): at a healthy step of a
    plain optimizer no row, name or record is made. Whatever the scan cannot clear (a tensor away from its
    parameter, ZeRO, a device map asked for) is collected as rows and judged by the invariants, as before."""
    rows = None if keep_map else fast.scan(target.module, target.optimizer)
    findings: list[Finding] = []
    device_map: list[TensorRecord] = []
    if rows is None:
        rec = _snapshot(target, rank, label)
        findings = fast.colocation(rec)
        promise = _promise(target)
        if promise is not None:
            findings += fast.zero_placement(rec, promise)
        rows, device_map = len(rec), rec.records if keep_map else []
    if clip:
        findings += clip_norm_device(clip) + boundary_grads([*initial, *clip])
    return Check(findings, rows + len(clip), device_map)


def before_save(target: Target, rank: int, label: str, keep_map: bool = False) -> Check:
    """S1: every module parameter, frozen ones first, is a key of the name map under its name; the optimizer
    holds live parameters; nothing is on meta (a checkpoint written now would store no data for it)."""
    # once per tensor, under its first name, as named_parameters() lists them and DeepSpeed keys param_names (a
    # tied head is the embedding's object under another name, not a stale entry)
    params = [(name, param) for name, param, _ in by_tensor(named_tensors(target.module)[0])]
    ordered = sorted(params, key=lambda item: bool(item[1].requires_grad))  # frozen first (stable)
    if target.config or target.engine is not None:  # DeepSpeed writes the checkpoint through this map
        findings = param_name_map(ordered, target.name_map, rank=rank, stage=label)
    else:  # no DeepSpeed: state_dict() saves by module name; the replaced object is stale only for its old holders
        findings = param_name_map(
            ordered,
            target.name_map,
            rank=rank,
            stage=label,
            severity=Severity.WARNING,
            map_name="the Parameter -> name map taken when the watch started",
            consequence="whatever took the old object (DDP, a parameter-keyed map) no longer "
            "sees the new one",
        )
    findings += _coverage(target, rank, label)
    rec = Recorder(rank, label)
    for name, param in params:
        rec.add(param, role="param", path=name, owner=name)
    findings += fast.meta_params(rec)
    return Check(findings, len(rec), rec.records if keep_map else [])


def tied_records(target: Target, rank: int, stage: str) -> list[TensorRecord]:
    """The tied parameters (one record each, every name), for `after_load` to hold against."""
    rec = Recorder(rank, stage)
    collect_rows(rec, module=target.module)
    return rec.materialize(row for row in rec.rows if row[1] == "param" and row[4])


def fp32_records(target: Target, rank: int) -> list[TensorRecord]:
    """ZeRO's fp32 partitions as records at `after_init`, the stage `boundary_grads` holds the clip against."""
    rec = Recorder(rank, "after_init")
    collect_rows(rec, optimizer=target.optimizer)
    return rec.materialize(row for row in rec.rows if row[1] == "fp32_partition")


def guarded(findings: list[Finding], optimizer: Any) -> list[Finding]:
    """Colocation errors as warnings where the optimizer's own release moves its tensors back on access (a known
    issue of its package with this version outside the affected range): the job's next step copes, as the S4
    probe sees by taking it; the watch cannot take a step, so it goes by the version."""
    if not findings:
        return findings
    import dataclasses as dc
    from importlib import metadata

    from ds_doctor.knowledge import catalog
    from ds_doctor.reports.model import Verdict

    root = type(optimizer).__module__.split(".")[0]
    for dist in metadata.packages_distributions().get(root, []):
        version = metadata.version(dist)
        for issue in catalog.ISSUES:
            if (
                issue.package == dist
                and "optimizer_state_colocation" in issue.invariants
                and issue.version_verdict({dist: version}) == Verdict.NOT_AFFECTED
            ):
                note = (
                    f" ({dist} {version} moves them back on access; {issue.id} is fixed in {issue.fixed_in})"
                )
                return [
                    dc.replace(f, severity=Severity.WARNING, message=f.message + note)
                    if f.invariant == "optimizer_state_colocation"
                    else f
                    for f in findings
                ]
    return findings


def after_load(
    target: Target, rank: int, label: str, ties: list[TensorRecord], keep_map: bool = False
) -> Check:
    rec = _snapshot(target, rank, label)
    findings = guarded(fast.colocation(rec), target.optimizer) + fast.buffers_off(rec, target.device)
    findings += fast.meta_params(rec)
    # a resume that rebuilt the parameters leaves the optimizer orphans
    findings += _coverage(target, rank, label, rec)
    if ties:
        names = {name for record in ties for name in record.names}
        later = rec.materialize(
            row
            for row in rec.rows
            if row[1] == "param" and (row[2] in names or any(alias in names for alias in row[4]))
        )
        findings += ties_kept([*ties, *later], ties[0].stage, label)
    return Check(findings, len(rec), rec.records if keep_map else [])


def describe(moment: str) -> dict[str, Any]:
    scenario, what = MOMENTS[moment]
    return {"scenario": scenario, "checks": what}

"""Placement invariants (S2, S4): small pure functions over device maps and a ZeRO config's promise.

Each finding carries its evidence (the offending records), what was expected, and the rank and
stage, so a report reader can see the broken placement without re-running anything.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from ds_doctor.collect.devicemap import select
from ds_doctor.reports.model import Finding, Severity, TensorRecord

#: Roles a per-tensor optimizer state may be anchored to (its owner's own record).
ANCHOR_ROLES = ("param", "param_partition", "fp32_partition")


@dataclasses.dataclass(frozen=True)
class ZeroPromise:
    """Where a ZeRO config promises each kind of tensor will live, on one rank."""

    stage: int
    accelerator: str
    optimizer_device: str
    param_partition_device: str
    offload_optimizer: bool
    offload_param: bool
    bf16: bool
    grad_accum_dtype: str | None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], accelerator: str) -> ZeroPromise:
        zero = config.get("zero_optimization", {}) or {}
        opt_device = _offload_device(zero.get("offload_optimizer"))
        param_device = _offload_device(zero.get("offload_param"))
        return cls(
            stage=int(zero.get("stage", 0)),
            accelerator=accelerator,
            optimizer_device=opt_device or accelerator,
            param_partition_device=param_device or accelerator,
            offload_optimizer=opt_device is not None,
            offload_param=param_device is not None,
            bf16=bool((config.get("bf16") or {}).get("enabled", False)),
            grad_accum_dtype=(config.get("data_types") or {}).get("grad_accum_dtype"),
        )


def _offload_device(section: Mapping[str, Any] | None) -> str | None:
    """The device an offload section puts tensors on; NVMe swaps through CPU buffers."""
    if not section:
        return None
    device = str(section.get("device", "none")).lower()
    if device in ("none", ""):
        return None
    return "cpu" if device in ("cpu", "nvme") else device


def by_rank_stage(records: Iterable[TensorRecord]) -> dict[tuple[int, str], list[TensorRecord]]:
    groups: dict[tuple[int, str], list[TensorRecord]] = defaultdict(list)
    for record in records:
        groups[(record.rank, record.stage)].append(record)
    return groups


def check_placement(
    records: Iterable[TensorRecord], *, roles: tuple[str, ...], expected: str, invariant: str, what: str
) -> list[Finding]:
    """Every record of `roles` is on `expected`; one finding per (rank, stage) with the offenders."""
    findings = []
    for (rank, stage), group in sorted(by_rank_stage(select(records, role=roles)).items()):
        wrong = [r for r in group if r.device != expected]
        if wrong:
            listed = ", ".join(f"{r.path} on {r.device}" for r in wrong[:5])
            findings.append(
                Finding(
                    invariant=invariant,
                    severity=Severity.ERROR,
                    message=f"{len(wrong)} {what} not on {expected} (rank {rank}, {stage}): {listed}",
                    rank=rank,
                    stage=stage,
                    expected=expected,
                    evidence=tuple(wrong),
                )
            )
    return findings


def fp32_partition_placement(records: Iterable[TensorRecord], promise: ZeroPromise) -> list[Finding]:
    """(I1) each fp32 master partition is on the offload device, or on the rank's accelerator."""
    return check_placement(
        records,
        roles=("fp32_partition",),
        expected=promise.optimizer_device,
        invariant="fp32_partition_placement",
        what="fp32 partition(s)",
    )


def param_partition_placement(records: Iterable[TensorRecord], promise: ZeroPromise) -> list[Finding]:
    """(I5) with parameter offload, each ZeRO-3 parameter partition (`ds_tensor`) is on its device."""
    if not promise.offload_param:
        return []
    return check_placement(
        records,
        roles=("param_partition",),
        expected=promise.param_partition_device,
        invariant="param_partition_placement",
        what="parameter partition(s)",
    )


def boundary_grads(records: Iterable[TensorRecord], stage: str = "at_clip") -> list[Finding]:
    """(I2) at the accumulation boundary every fp32 partition has a gradient of its device, numel, dtype.

    `stage` holds what `unscale_and_clip_grads` saw; every partition a rank had at `after_init`
    must show up there, or its gradient never reached the step.
    """
    records = list(records)
    findings: list[Finding] = []
    groups = by_rank_stage(records)
    ranks = sorted({r.rank for r in select(records, role="fp32_partition")})
    for rank in ranks:
        at_clip = groups.get((rank, stage), [])
        clipped = {r.path: r for r in select(at_clip, role="fp32_partition")}
        grads = {r.owner: r for r in select(at_clip, role="fp32_partition_grad")}
        initial = select(groups.get((rank, "after_init"), []), role="fp32_partition")
        never = [r for r in initial if r.path not in clipped]
        if never:
            findings.append(
                Finding(
                    invariant="boundary_grad_matches_partition",
                    severity=Severity.ERROR,
                    message=f"{len(never)} fp32 partition(s) never reached unscale_and_clip_grads on rank {rank}: "
                    + ", ".join(r.path for r in never[:5]),
                    rank=rank,
                    stage=stage,
                    expected="every fp32 partition is unscaled and clipped at the boundary",
                    evidence=tuple(never),
                )
            )
        for path, partition in sorted(clipped.items()):
            findings.extend(_compare_grad(partition, grads.get(path), stage))
    return findings


def _compare_grad(partition: TensorRecord, grad: TensorRecord | None, stage: str) -> list[Finding]:
    if grad is None:
        problem = "has no gradient"
        evidence: tuple[TensorRecord, ...] = (partition,)
    else:
        diffs = [
            f"{field} {getattr(grad, field)} vs {getattr(partition, field)}"
            for field in ("device", "numel", "dtype")
            if getattr(grad, field) != getattr(partition, field)
        ]
        if not diffs:
            return []
        problem = "gradient differs: " + "; ".join(diffs)
        evidence = (partition, grad)
    return [
        Finding(
            invariant="boundary_grad_matches_partition",
            severity=Severity.ERROR,
            message=f"{partition.path} (rank {partition.rank}, {stage}) {problem}",
            rank=partition.rank,
            stage=stage,
            expected=f"a gradient on {partition.device}, {partition.dtype}, numel {partition.numel}",
            evidence=evidence,
        )
    ]


def optimizer_state_colocation(records: Iterable[TensorRecord]) -> list[Finding]:
    """(I3) every optimizer state and group tensor sits on the device of the tensor it belongs to.

    0-dim CPU tensors of per-parameter `state` are exempt: torch keeps AdamW's `step` there on
    purpose and lets it mix with any device. Tensors kept in `param_groups` are not: optimizers
    update them in place with device tensors (Prodigy's `running_d_denom.add_(...)`), which a CPU
    tensor cannot take from a GPU one.
    """
    findings = []
    for (rank, stage), group in sorted(by_rank_stage(records).items()):
        anchors = {r.path: r for r in group if r.role in ANCHOR_ROLES}
        wrong: list[TensorRecord] = []
        anchor_of: dict[str, TensorRecord] = {}
        for record in select(group, role=("optim_state", "optim_group_tensor")):
            anchor = anchors.get(record.owner or "")
            exempt = record.role == "optim_state" and record.is_cpu_scalar
            if anchor is None or exempt or record.device == anchor.device:
                continue
            wrong.append(record)
            anchor_of[record.path] = anchor
        if wrong:
            listed = ", ".join(
                f"{r.path} on {r.device} (owner on {anchor_of[r.path].device})" for r in wrong[:5]
            )
            anchors_used = {anchor_of[r.path].path: anchor_of[r.path] for r in wrong}
            findings.append(
                Finding(
                    invariant="optimizer_state_colocation",
                    severity=Severity.ERROR,
                    message=f"{len(wrong)} optimizer tensor(s) not with their parameter (rank {rank}, "
                    f"{stage}): {listed}",
                    rank=rank,
                    stage=stage,
                    expected="each optimizer tensor on its parameter's device",
                    evidence=tuple(wrong) + tuple(anchors_used.values()),
                )
            )
    return findings


_CALL = re.compile(r"^(unscale_and_clip_grads\[\d+\])\.(total_norm|grads\[\d+\]|loss_scale)$")


def clip_norm_device(records: Iterable[TensorRecord]) -> list[Finding]:
    """(I4) the norm that scales the gradients is on their device, a 0-dim CPU tensor, or a number.

    This is the line that crashed in DeepSpeed 0.14.1-0.14.2 (issue #5538): a 0-dim CUDA norm
    multiplied into CPU-offloaded gradients.
    """
    calls: dict[tuple[int, str], dict[str, list[TensorRecord]]] = defaultdict(lambda: defaultdict(list))
    for record in select(records, role="clip_operand"):
        match = _CALL.match(record.path)
        if match:
            kind = "grads" if match.group(2).startswith("grads") else match.group(2)
            calls[(record.rank, match.group(1))][kind].append(record)
    findings = []
    for (rank, call), operands in sorted(calls.items()):
        for norm in operands.get("total_norm", []):
            clashes = [
                g for g in operands.get("grads", []) if not norm.is_cpu_scalar and g.device != norm.device
            ]
            if clashes:
                findings.append(
                    Finding(
                        invariant="clip_norm_device",
                        severity=Severity.ERROR,
                        message=f"{call}: total_norm on {norm.device} scales gradients on "
                        f"{', '.join(sorted({g.device for g in clashes}))} (rank {rank}, {norm.stage})",
                        rank=rank,
                        stage=norm.stage,
                        expected="total_norm on the gradients' device, a 0-dim CPU tensor, or a Python number",
                        evidence=(norm, *clashes),
                    )
                )
    return findings


def grad_accum_dtype(promise: ZeroPromise) -> list[Finding]:
    """Warn where bf16 training accumulates gradients in bf16 (`data_types.grad_accum_dtype` unset): advice on a
    user's config (`--deepspeed-config`, a watched job's engine), never on a probe's own, which leaves it unset on
    purpose as most users do."""
    if promise.bf16 and promise.grad_accum_dtype is None:
        return [
            Finding(
                invariant="grad_accum_dtype",
                severity=Severity.WARNING,
                message="bf16 is on and data_types.grad_accum_dtype is unset: gradients accumulate in bf16, "
                "which loses precision over many micro steps",
                expected='"data_types": {"grad_accum_dtype": "fp32"}',
            )
        ]
    return []


@dataclasses.dataclass(frozen=True)
class BuiltOptimizer:
    """What a DeepSpeed engine was asked for and what it built: its ZeRO stage, bf16, gradient accumulation in fp32,
    the optimizer offloaded to the CPU (each as the engine read its config), and its optimizer's class."""

    stage: int
    bf16: bool
    accumulate_fp32: bool
    cpu_offload: bool
    # the built class's own name, then every class it derives from: ZenFlow's ZeRO-1/2 optimizer and SuperOffload's
    # ZeRO-3 one derive from the ZeRO optimizers (read in 0.19.8) and are theirs
    lineage: tuple[str, ...]

    @property
    def built(self) -> str:
        """The class the engine built."""
        return self.lineage[0]

    @classmethod
    def of(cls, engine: Any) -> BuiltOptimizer:
        """A DeepSpeed engine's configuration as it read it, and the optimizer it built."""
        import torch

        return cls(
            stage=int(engine.zero_optimization_stage()),
            bf16=bool(engine.bfloat16_enabled()),
            accumulate_fp32=engine.get_data_types()[1] == torch.float32,
            cpu_offload=bool(engine.zero_cpu_offload()),
            lineage=tuple(klass.__name__ for klass in type(engine.optimizer).__mro__),
        )

    def routed(self) -> str | None:
        """The optimizer DeepSpeed's engine routes this configuration to (`_do_optimizer_sanity_check`, the same in
        0.14.4, 0.17.1 and 0.19.8): ZeRO-3 its own; ZeRO-1 in bf16 with fp32 accumulation and no CPU offload the
        BF16_Optimizer; ZeRO-1 or -2 otherwise the ZeRO optimizer. None at stage 0, whose wrappers follow the
        precision and the optimizer's kind."""
        if self.stage == 3:
            return "DeepSpeedZeroOptimizer_Stage3"
        if self.stage == 1 and self.bf16 and self.accumulate_fp32 and not self.cpu_offload:
            return "BF16_Optimizer"
        if self.stage in (1, 2):
            return "DeepSpeedZeroOptimizer"
        return None


def zero_optimizer_built(engine: BuiltOptimizer, setting: str) -> list[Finding]:
    """(I6) the engine built the optimizer its ZeRO configuration routes to. Another one is not that stage's
    optimizer at all: DeepSpeed 0.17.6-0.18.4 built ZeRO-1 in bf16 with fp32 accumulation as the non-ZeRO fp16
    wrapper (every rank keeping the whole optimizer state), which trained within bf16's tolerance and failed only
    at a resume."""
    routed = engine.routed()
    # ZeRO-3 given no optimizer keeps only its parameter offload (DeepSpeedZeRoOffload): that stage's, too
    allowed = {routed, "DeepSpeedZeRoOffload"} if routed == "DeepSpeedZeroOptimizer_Stage3" else {routed}
    if routed is None or allowed & set(engine.lineage):
        return []
    return [
        Finding(
            invariant="zero_optimizer_built",
            severity=Severity.ERROR,
            message=f"ZeRO stage {engine.stage} was configured and the engine built {engine.built}, not "
            f"{routed}: not that stage's optimizer ({setting})",
            stage="initialize",
            expected=f"{routed}, the optimizer DeepSpeed routes ZeRO stage {engine.stage} to"
            + (" in bf16 with fp32 gradient accumulation" if routed == "BF16_Optimizer" else ""),
            data=dataclasses.asdict(engine),
        )
    ]


def zero_invariants(records: Iterable[TensorRecord], promise: ZeroPromise) -> list[Finding]:
    """The S2 set: I1-I5, where the config put each tensor. Advice on the config itself (`grad_accum_dtype`) is the
    caller's to ask for, of a user's config."""
    records = list(records)
    return [
        *fp32_partition_placement(records, promise),
        *boundary_grads(records),
        *optimizer_state_colocation(records),
        *clip_norm_device(records),
        *param_partition_placement(records, promise),
    ]

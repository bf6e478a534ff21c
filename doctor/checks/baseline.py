"""Against a baseline (`ds-doctor diff BASELINE NEW`, `run --baseline`): what changed on a node since its
baseline report, and whether it regressed.

Regressions (exit code 1): a case that was not failing and now fails, errors or times out (or a
new case that does); a new error finding; fewer GPUs, or a GPU with less memory; a measure that
`ds_doctor.reports.measures.MEASURES` says is better higher or lower (bandwidths, TFLOP/s) worse than the baseline
by more than the tolerance. Everything else that changed is reported and does not fail: outcomes
that got better, a case the new run never got to (`not_run`: it stopped first), new warnings, versions, drivers,
hosts, measures that got faster.
"""

from __future__ import annotations

from collections.abc import Mapping

from ds_doctor.checks.noderecords import aer_rising
from ds_doctor.reports.diff import Change, Diff
from ds_doctor.reports.measures import MEASURES
from ds_doctor.reports.model import FAILING, CaseResult, Finding, Outcome, Report, Severity
from ds_doctor.reports.noderecords import AerRecord, SourceState

DEFAULT_TOLERANCE_PCT = 10.0


def _label(report: Report) -> str:
    return f"{report.hardware.host} @ {report.started_at}"


def outcome_changes(base: Mapping[str, CaseResult], new: Mapping[str, CaseResult]) -> list[Change]:
    changes = []
    for case, result in new.items():
        before = base.get(case)
        if before is None:
            if result.outcome in FAILING:
                changes.append(
                    Change(
                        "outcome",
                        case,
                        None,
                        result.outcome.value,
                        True,
                        f"new case, {result.outcome.value}: {result.reason or ''}".rstrip(": "),
                    )
                )
            else:
                changes.append(Change("case", case, None, result.outcome.value, False, "new case"))
        elif before.outcome != result.outcome:
            changes.append(_outcome_change(case, before, result))
    for case, result in base.items():
        if case not in new:
            changes.append(Change("case", case, result.outcome.value, None, False, "not in the new run"))
    return changes


def _outcome_change(case: str, before: CaseResult, after: CaseResult) -> Change:
    """A case whose outcome changed: a regression where it now fails and did not (one the baseline never ran, as a
    new case); a case the new run never got to (`not_run`: it stopped first) is neither a regression nor a recovery,
    only said."""
    if after.outcome == Outcome.NOT_RUN:
        detail = "not run: the new run stopped before this case"
        return Change("outcome", case, before.outcome.value, after.outcome.value, False, detail)
    regression = after.outcome in FAILING and before.outcome not in FAILING
    recovered = before.outcome in FAILING and after.outcome not in FAILING
    detail = "recovered" if recovered else after.reason or ""
    return Change("outcome", case, before.outcome.value, after.outcome.value, regression, detail)


def _finding_keys(result: CaseResult) -> dict[tuple[str, Severity], Finding]:
    return {(f.invariant, f.severity): f for f in result.findings}


#: The fields of a finding's data that say where a divergence is: a divergence that moved is a change
WHERE = ("step", "stage", "quantity")


def _where(finding: Finding) -> str | None:
    """`step 2, update of fc.weight` from a finding's data; None where it names no step."""
    data = finding.data
    if "step" not in data:
        return None
    stage, quantity = data.get("stage"), data.get("quantity")
    return f"step {data['step']}, {stage}" + (f" of {quantity}" if quantity and quantity != stage else "")


def _moved(case: str, before: Finding, after: Finding, failing: bool) -> Change | None:
    """The same finding at another step or quantity: a regression where it now shows earlier in a failing case."""
    if all(before.data.get(k) == after.data.get(k) for k in WHERE) or _where(after) is None:
        return None
    earlier = (
        isinstance(before.data.get("step"), int)
        and isinstance(after.data.get("step"), int)
        and (after.data["step"] < before.data["step"])
    )
    regression = earlier and after.is_error and failing
    return Change("finding", case, _where(before), _where(after), regression, after.message)


def finding_changes(base: Mapping[str, CaseResult], new: Mapping[str, CaseResult]) -> list[Change]:
    """Findings (by case, invariant and severity) the baseline did not have, and those whose data says they moved
    (a divergence that shows at an earlier step is a regression). An error finding regresses only in a case that
    fails: the findings of a reproduction that behaves as designed (`xfail`) are what it is for, never a regression."""
    changes = []
    for case, result in new.items():
        before = _finding_keys(base[case]) if case in base else {}
        for (invariant, severity), finding in _finding_keys(result).items():
            message = finding.message
            failing = result.outcome in FAILING
            if (invariant, severity) in before:
                moved = _moved(case, before[(invariant, severity)], finding, failing)
                changes += [moved] if moved else []
            else:
                changes.append(
                    Change(
                        "finding",
                        case,
                        None,
                        f"{severity.value} {invariant}",
                        severity == Severity.ERROR and failing,
                        message,
                    )
                )
    return changes


def version_changes(base: Report, new: Report) -> list[Change]:
    changes = []
    before = {**base.env.packages, "python": base.env.python, "cuda": base.env.cuda, "nccl": base.env.nccl}
    after = {**new.env.packages, "python": new.env.python, "cuda": new.env.cuda, "nccl": new.env.nccl}
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            changes.append(Change("version", name, before.get(name), after.get(name), False))
    return changes


def hardware_changes(base: Report, new: Report) -> list[Change]:
    changes = []
    for label, old, now in (
        ("driver", base.env.driver, new.env.driver),
        ("CUDA driver", base.env.cuda_driver, new.env.cuda_driver),
    ):
        if old != now:
            changes.append(Change("hardware", label, old, now, False))
    if base.hardware.host != new.hardware.host:
        changes.append(
            Change(
                "hardware",
                "host",
                base.hardware.host,
                new.hardware.host,
                False,
                "the reports come from different hosts",
            )
        )
    gpus_before, gpus_after = base.hardware.gpus, new.hardware.gpus
    if len(gpus_before) != len(gpus_after):
        changes.append(
            Change(
                "hardware",
                "GPU count",
                len(gpus_before),
                len(gpus_after),
                len(gpus_after) < len(gpus_before),
                new.hardware.gpus_reason or "",
            )
        )
    for before, after in zip(gpus_before, gpus_after, strict=False):
        gpu = f"GPU {after.index}"
        if before.name != after.name:
            changes.append(Change("hardware", f"{gpu} model", before.name, after.name, False))
        if before.uuid != after.uuid:
            changes.append(
                Change(
                    "hardware",
                    f"{gpu} UUID",
                    before.uuid,
                    after.uuid,
                    False,
                    "a different board in this slot",
                )
            )
        total_before, total_after = before.memory_total_bytes, after.memory_total_bytes
        if total_before is not None and total_after is not None and total_before != total_after:
            changes.append(
                Change("hardware", f"{gpu} memory", total_before, total_after, total_after < total_before)
            )
    return changes


#: On a CPU (gloo, the host's matmul) a bandwidth or TFLOP/s is noise at a GPU node's tolerance. Measured on a
#: 2-core machine, 11 healthy level-3 runs of comm and compute, nothing else running: between two of them a measure
#: fell by up to 60 % (broadcast busbw 4.54 -> 1.80 GB/s; all_gather 2.26 -> 1.01; matmul bf16 0.41 -> 0.30 TFLOP/s).
#: A CPU case's measure is compared at this tolerance at least, and the change says so.
CPU_TOLERANCE_PCT = 70.0


def measure_changes(
    base: Mapping[str, CaseResult], new: Mapping[str, CaseResult], tolerance_pct: float
) -> list[Change]:
    """A compared measure worse than the baseline by more than the tolerance regresses; better is only reported.
    A CPU case's tolerance is at least CPU_TOLERANCE_PCT, its measured noise."""
    changes = []
    for case, result in new.items():
        # ranks on one GPU: no node's figure
        if case not in base or result.shared_gpu or base[case].shared_gpu:
            continue
        on_cpu = "cpu" in (result.device_kind, base[case].device_kind)
        tolerance = max(tolerance_pct, CPU_TOLERANCE_PCT) if on_cpu else tolerance_pct
        said = (
            f"on CPU: tolerance {tolerance:g}%, its measured noise" if on_cpu else f"tolerance {tolerance:g}%"
        )
        before_measures, after_measures = base[case].applicable_measures(), result.applicable_measures()
        for name, after in after_measures.items():
            before, better = before_measures.get(name), MEASURES[name].better
            if better is None or before is None or after is None or before <= 0:
                continue
            delta_pct = (after - before) / before * 100
            if abs(delta_pct) > tolerance:
                worse = delta_pct < 0 if better == "higher" else delta_pct > 0
                changes.append(
                    Change("measure", f"{case} {name}", before, after, worse, f"{delta_pct:+.1f}% ({said})")
                )
    return changes


def _aer_record(report: Report) -> AerRecord | None:
    records = report.hardware.node_records
    aer = records.aer if records is not None else None
    return aer if aer is not None and aer.state is SourceState.READ else None


def aer_changes(base: Report, new: Report) -> list[Change]:
    """PCIe AER counts that rose since the baseline (the node's fault records): reported, not a regression (a
    link correcting more errors still works; a fatal one already fails its node_records[aer] result)."""
    before, after = _aer_record(base), _aer_record(new)
    if before is None or after is None:
        return []
    return [
        Change(
            "hardware",
            f"AER {f.data['kind']} errors of {f.data['pci']}",
            f.data["before"],
            f.data["now"],
            False,
            f.remedy or "",
        )
        for f in aer_rising(after, before)
    ]


def diff_reports(base: Report, new: Report, tolerance_pct: float = DEFAULT_TOLERANCE_PCT) -> Diff:
    if not 0 <= tolerance_pct < 100:
        raise ValueError(f"tolerance must be in [0, 100) percent, got {tolerance_pct}")
    before = {r.key: r for r in base.results}
    after = {r.key: r for r in new.results}
    changes = [
        *outcome_changes(before, after),
        *finding_changes(before, after),
        *measure_changes(before, after, tolerance_pct),
        *hardware_changes(base, new),
        *aer_changes(base, new),
        *version_changes(base, new),
    ]
    return Diff(_label(base), _label(new), tolerance_pct, tuple(changes))

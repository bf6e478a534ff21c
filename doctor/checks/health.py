"""GPU health rules as pure functions over NVML readings (`ds_doctor.hardware.nvml`), and the
`gpu_health[gpuN]` results they make.

The rules read only the dicts `read_gpus` returns, so they are tested over recorded readings, with
no GPU. Severity `error` means the node is not fit for a training job (the run exits 1); `warning`
means it will run slower or with less memory than it should.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from ds_doctor.reports.model import CaseResult, Finding, Outcome, Severity
from ds_doctor.reports.sections import GpuReading
from ds_doctor.reports.views import GpuCheck

GIB = 1 << 30

HW_SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SW_SLOWDOWN = ("sw_power_cap", "sw_thermal_slowdown")
#: Memory in use with no process NVML can name (another container's) worth a warning.
UNNAMED_MEMORY_BYTES = 2 * GIB


# ---- health rules: pure functions over one GPU's reading ------------------------------------------


P = ParamSpec("P")
R = TypeVar("R")


def _reading(
    rule: Callable[Concatenate[GpuReading, P], R],
) -> Callable[Concatenate[GpuReading | Mapping[str, Any], P], R]:
    """A rule over a typed reading that also takes the reading's dict (NVML's reader, a recorded fixture)."""

    @functools.wraps(rule)
    def wrapped(gpu: GpuReading | Mapping[str, Any], *args: P.args, **kwargs: P.kwargs) -> R:
        return rule(GpuReading.of(gpu), *args, **kwargs)

    return wrapped


def _finding(
    gpu: GpuReading, rule: str, severity: Severity, message: str, expected: str, remedy: str
) -> Finding:
    return Finding(
        invariant=rule,
        severity=severity,
        message=f"GPU {gpu.index}: {message}",
        stage="health",
        expected=expected,
        remedy=remedy,
    )


@_reading
def ecc_errors(gpu: GpuReading) -> list[Finding]:
    out = []
    volatile, aggregate = gpu.ecc_uncorrected_volatile, gpu.ecc_uncorrected_aggregate
    if volatile:
        out.append(
            _finding(
                gpu,
                "uncorrected_ecc",
                Severity.ERROR,
                f"{volatile} uncorrected ECC error(s) since the driver was last loaded",
                "0 volatile uncorrected ECC errors",
                "drain the node; reset the GPU (nvidia-smi -r) and rerun; if they come back, RMA the GPU",
            )
        )
    elif aggregate:
        out.append(
            _finding(
                gpu,
                "uncorrected_ecc_lifetime",
                Severity.WARNING,
                f"{aggregate} uncorrected ECC error(s) over the GPU's lifetime (none since the last load)",
                "0 aggregate uncorrected ECC errors",
                "watch the count; rising counts mean an RMA",
            )
        )
    if gpu.ecc_enabled is False:
        out.append(
            _finding(
                gpu,
                "ecc_disabled",
                Severity.WARNING,
                "ECC is disabled: memory errors go undetected",
                "ECC enabled",
                "enable it (nvidia-smi -e 1) and reset the GPU",
            )
        )
    return out


@_reading
def pending_retirement(gpu: GpuReading) -> list[Finding]:
    out = []
    if gpu.retired_pages_pending:
        out.append(
            _finding(
                gpu,
                "retired_pages_pending",
                Severity.ERROR,
                "page retirement is pending",
                "no pending page retirement",
                "reset the GPU (or reboot) so the pages are retired before the next job",
            )
        )
    if gpu.remapped_rows_pending:
        out.append(
            _finding(
                gpu,
                "remapped_rows_pending",
                Severity.ERROR,
                "a row remap is pending",
                "no pending row remap",
                "reset the GPU (nvidia-smi -r) so the remap takes effect",
            )
        )
    if gpu.remapped_rows_failed:
        out.append(
            _finding(
                gpu,
                "remapped_rows_failed",
                Severity.ERROR,
                "row remapping failed: no spare rows left",
                "no failed row remap",
                "drain the node and RMA the GPU",
            )
        )
    return out


@_reading
def pcie_link(gpu: GpuReading) -> list[Finding]:
    """A narrower link than the GPU and slot support is always wrong; a lower generation is only
    wrong under load, since GPUs drop the link generation to save power when idle."""
    out = []
    width, width_max = gpu.pcie_width, gpu.pcie_width_max
    if width is not None and width_max is not None and width < width_max:
        out.append(
            _finding(
                gpu,
                "pcie_width_downgraded",
                Severity.WARNING,
                f"PCIe link is x{width}, the GPU and slot support x{width_max}",
                f"x{width_max}",
                "reseat the GPU or riser; check the slot's wiring and BIOS settings",
            )
        )
    gen, gen_max = gpu.pcie_gen, gpu.pcie_gen_max
    if gen is not None and gen_max is not None and gen < gen_max:
        busy = bool(gpu.utilization_gpu_pct)
        out.append(
            _finding(
                gpu,
                "pcie_gen_downgraded",
                Severity.WARNING if busy else Severity.INFO,
                f"PCIe link runs at gen {gen} of {gen_max}" + ("" if busy else " while idle (power saving)"),
                f"gen {gen_max} under load",
                "under load this halves host transfers (CPU offload): check BIOS link speed and risers",
            )
        )
    return out


@_reading
def idle_throttling(gpu: GpuReading) -> list[Finding]:
    """Clock slowdowns on an idle GPU point at the board (power brake, thermal) or its cooling."""
    reasons = gpu.throttle_reasons
    if not reasons:
        return []
    hw = [name for name in reasons if name in HW_SLOWDOWN]
    sw = [name for name in reasons if name in SW_SLOWDOWN]
    idle = gpu.utilization_gpu_pct == 0
    out = []
    if hw:
        out.append(
            _finding(
                gpu,
                "hw_slowdown",
                Severity.ERROR if idle else Severity.WARNING,
                f"hardware clock slowdown ({', '.join(hw)})" + (" while idle" if idle else ""),
                "no hardware slowdown",
                "check cooling, power supply and the board; drain the node if it throttles while idle",
            )
        )
    if sw and idle:
        out.append(
            _finding(
                gpu,
                "idle_throttling",
                Severity.WARNING,
                f"clocks held down while idle ({', '.join(sw)})",
                "no power cap or thermal slowdown while idle",
                "check the power limit (nvidia-smi -q -d POWER) and the GPU's temperature",
            )
        )
    return out


@_reading
def foreign_memory(gpu: GpuReading, own_pids: Iterable[int] = ()) -> list[Finding]:
    """Memory held by processes other than ds-doctor's: a job on this node gets less than it expects."""
    own = set(own_pids)
    processes = gpu.processes
    others = [p for p in processes or [] if p.get("pid") not in own]
    out = []
    if others:
        held = sum(p.get("used_memory_bytes") or 0 for p in others)
        who = ", ".join(f"{p.get('name') or '?'} (pid {p.get('pid')})" for p in others[:5])
        out.append(
            _finding(
                gpu,
                "foreign_memory",
                Severity.WARNING,
                f"{len(others)} other process(es) hold {held / GIB:.1f} GiB: {who}",
                "no other process on the GPU",
                "stop the leftover processes before the job",
            )
        )
    elif processes is not None and not processes and (gpu.memory_used_bytes or 0) > UNNAMED_MEMORY_BYTES:
        out.append(
            _finding(
                gpu,
                "foreign_memory",
                Severity.WARNING,
                f"{(gpu.memory_used_bytes or 0) / GIB:.1f} GiB in use with no process visible here "
                "(another container or namespace)",
                "no memory in use",
                "find the holder with nvidia-smi on the host",
            )
        )
    return out


RULES: tuple[Callable[[GpuReading], list[Finding]], ...] = (
    ecc_errors,
    pending_retirement,
    pcie_link,
    idle_throttling,
)


def health_findings(
    gpu: GpuReading | Mapping[str, Any], own_pids: Iterable[int] | None = None
) -> list[Finding]:
    """Every health rule over one GPU's reading."""
    gpu = GpuReading.of(gpu)
    own = {os.getpid()} if own_pids is None else set(own_pids)
    findings = [finding for rule in RULES for finding in rule(gpu)]
    return findings + foreign_memory(gpu, own)


# ---- health as case results: the report, JUnit, Prometheus, diff and the exit code read them ------

#: the family its cases go under: the view renderers find them by (`ds_doctor.reports.views.GpuCheck`)
PROBE = GpuCheck.FAMILY
DEVICE_FILE = "/dev/nvidiactl"


def health_results(
    gpus: Sequence[GpuReading | Mapping[str, Any]], reason: str | None, *, device_file: str = DEVICE_FILE
) -> list[CaseResult]:
    """One `gpu_health[gpuN]` result per GPU: `fail` on an error finding, else `pass`. A node with
    NVIDIA device files where NVML still finds no GPU gets one `gpu_health[nvml]` error; a node
    with neither has no GPU to judge and gets no result (its hardware section says why)."""
    if not gpus:
        if reason and os.path.exists(device_file):
            return [
                CaseResult(
                    probe=PROBE,
                    case=f"{PROBE}[nvml]",
                    scenario="smoke",
                    level=1,
                    world_size=1,
                    device_kind="cuda",
                    outcome=Outcome.ERROR,
                    duration_s=0.0,
                    reason=f"{device_file} exists but NVML finds no GPU: {reason}",
                )
            ]
        return []
    results = []
    for given in gpus:
        gpu = GpuReading.of(given)
        findings = health_findings(gpu)
        failed = [f for f in findings if f.is_error]
        results.append(
            CaseResult(
                probe=PROBE,
                case=f"{PROBE}[gpu{gpu.index}]",
                scenario="smoke",
                level=1,
                world_size=1,
                device_kind="cuda",
                outcome=Outcome.FAIL if failed else Outcome.PASS,
                duration_s=0.0,
                reason="; ".join(f.message for f in failed) or None,
                findings=tuple(findings),
                notes={
                    "gpu": gpu.name,
                    "uuid": gpu.uuid,
                    "pci_bus_id": gpu.pci_bus_id,
                    "unavailable": sorted(gpu.unavailable),
                },
            )
        )
    return results

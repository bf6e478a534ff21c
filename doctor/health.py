"""GPU health: NVML readings per GPU, and health rules as pure functions over those readings.

`read_gpus` asks NVML (NVIDIA's `nvidia-ml-py`, imported as `pynvml`) for each field on its own:
any call may be unsupported on some GPU, driver or container, and then that field is `None` and
`unavailable[field]` says why; the reading never raises. Without NVML or a GPU the list is empty
and the reason says which.

The rules (`health_findings`) read only the dicts `read_gpus` returns, so they are tested over
recorded readings, with no GPU. Severity `error` means the node is not fit for a training job
(the run exits 1); `warning` means it will run slower or with less memory than it should.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from doctor.invariants import ERROR, INFO, WARNING, Finding
from doctor.outcomes import Outcome
from reports.model import CaseResult

GIB = 1 << 30

#: NVML's clocks-event (throttle) reason bits, by the names used in readings.
THROTTLE_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
HW_SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SW_SLOWDOWN = ("sw_power_cap", "sw_thermal_slowdown")
#: Memory in use with no process NVML can name (another container's) worth a warning.
UNNAMED_MEMORY_BYTES = 2 * GIB


def throttle_names(mask: int) -> list[str]:
    return [name for name, bit in THROTTLE_BITS.items() if mask & bit]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class _Reading:
    """Fills one GPU's dict field by field; a call that fails leaves its fields None with the reason."""

    def __init__(self, index: int) -> None:
        self.gpu: dict[str, Any] = {"index": index, "unavailable": {}}

    def read(self, fields: str | tuple[str, ...], call: Callable[[], Any],
             convert: Callable[[Any], Any] = lambda value: value) -> None:
        names = (fields,) if isinstance(fields, str) else fields
        try:
            values = convert(call())
        except Exception as exc:  # NVMLError_NotSupported, NoPermission, FunctionNotFound (old drivers), ...
            for name in names:
                self.gpu[name] = None
                self.gpu["unavailable"][name] = _reason(exc)
            return
        if isinstance(fields, str):
            values = (values,)
        for name, value in zip(names, values, strict=True):
            self.gpu[name] = value


def _read_gpu(nvml: Any, index: int, handle: Any) -> dict[str, Any]:
    r = _Reading(index)
    r.read("name", lambda: nvml.nvmlDeviceGetName(handle), _text)
    r.read("uuid", lambda: nvml.nvmlDeviceGetUUID(handle), _text)
    r.read("pci_bus_id", lambda: nvml.nvmlDeviceGetPciInfo(handle).busId, _text)
    r.read(("memory_total_bytes", "memory_used_bytes"), lambda: nvml.nvmlDeviceGetMemoryInfo(handle),
           lambda m: (int(m.total), int(m.used)))
    r.read("compute_capability", lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle),
           lambda cc: f"{cc[0]}.{cc[1]}")
    r.read(("ecc_enabled", "ecc_enabled_pending"), lambda: nvml.nvmlDeviceGetEccMode(handle),
           lambda mode: (bool(mode[0]), bool(mode[1])))
    for counter, name in ((nvml.NVML_VOLATILE_ECC, "volatile"), (nvml.NVML_AGGREGATE_ECC, "aggregate")):
        r.read(f"ecc_uncorrected_{name}", lambda counter=counter: nvml.nvmlDeviceGetTotalEccErrors(
            handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter), int)
    causes = (("retired_pages_sbe", nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
              ("retired_pages_dbe", nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))
    for name, cause in causes:
        r.read(name, lambda cause=cause: nvml.nvmlDeviceGetRetiredPages(handle, cause), len)
    r.read("retired_pages_pending", lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle), bool)
    r.read(("remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending",
            "remapped_rows_failed"), lambda: nvml.nvmlDeviceGetRemappedRows(handle),
           lambda rows: (int(rows[0]), int(rows[1]), bool(rows[2]), bool(rows[3])))
    r.read(("throttle_mask", "throttle_reasons"), lambda: _throttle_mask(nvml, handle),
           lambda mask: (int(mask), throttle_names(int(mask))))
    r.read(("utilization_gpu_pct", "utilization_memory_pct"), lambda: nvml.nvmlDeviceGetUtilizationRates(handle),
           lambda u: (int(u.gpu), int(u.memory)))
    r.read("temperature_c", lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU), int)
    r.read("power_draw_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle), lambda mw: round(mw / 1000, 1))
    r.read("power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle), lambda mw: round(mw / 1000, 1))
    for clock, name in ((nvml.NVML_CLOCK_SM, "sm"), (nvml.NVML_CLOCK_MEM, "mem")):
        r.read(f"clock_{name}_mhz", lambda clock=clock: nvml.nvmlDeviceGetClockInfo(handle, clock), int)
        r.read(f"clock_{name}_max_mhz", lambda clock=clock: nvml.nvmlDeviceGetMaxClockInfo(handle, clock), int)
    r.read("pcie_gen", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle), int)
    r.read("pcie_gen_max", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle), int)
    r.read("pcie_width", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle), int)
    r.read("pcie_width_max", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle), int)
    r.read("nvlink", lambda: _nvlinks(nvml, handle))
    r.read("processes", lambda: _processes(nvml, handle))
    return r.gpu


def _throttle_mask(nvml: Any, handle: Any) -> int:
    """Clock event reasons (NVML 12.2+); the older name where the newer one is missing or refused."""
    try:
        return nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    except Exception:
        return nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)


def _nvlinks(nvml: Any, handle: Any) -> list[dict[str, Any]]:
    """Each NVLink's state; the first link's error means no NVLink here (raised: the field's reason)."""
    links = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception:
            if link == 0:
                raise
            break
        links.append({"link": link, "active": bool(state)})
    return links


def _processes(nvml: Any, handle: Any) -> list[dict[str, Any]]:
    """Compute processes holding memory: pid, name where this namespace can see it, bytes (None: not told)."""
    out = []
    for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
        used = getattr(proc, "usedGpuMemory", None)
        out.append({"pid": int(proc.pid), "name": _process_name(int(proc.pid)),
                    "used_memory_bytes": int(used) if isinstance(used, int) else None})
    return out


def _process_name(pid: int) -> str | None:
    try:
        import psutil

        return psutil.Process(pid).name()
    except Exception:
        return None


def read_gpus(nvml: Any = None) -> tuple[list[dict[str, Any]], str | None, dict[str, str | None]]:
    """(GPU readings, the reason when there are none, {"driver", "cuda_driver"}); never raises."""
    versions: dict[str, str | None] = {"driver": None, "cuda_driver": None}
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return [], "NVML not available: pip install nvidia-ml-py", versions
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return [], f"NVML could not initialise ({_reason(exc)}): no NVIDIA driver or GPU here", versions
    try:
        try:
            versions["driver"] = _text(nvml.nvmlSystemGetDriverVersion())
        except Exception:
            pass
        try:
            cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
            versions["cuda_driver"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except Exception:
            pass
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            return [], f"NVML could not count the GPUs: {_reason(exc)}", versions
        gpus = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception as exc:
                gpus.append({"index": index, "unavailable": {"handle": _reason(exc)}})
                continue
            gpus.append({**_read_gpu(nvml, index, handle), **versions})  # the system's drivers, on each GPU too
        return gpus, None if gpus else "NVML reports no GPUs", versions
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


# ---- health rules: pure functions over one GPU's reading ------------------------------------------

def _finding(gpu: Mapping[str, Any], rule: str, severity: str, message: str, expected: str, remedy: str) -> Finding:
    return Finding(invariant=rule, severity=severity, message=f"GPU {gpu.get('index')}: {message}",
                   stage="health", expected=expected, remedy=remedy)


def ecc_errors(gpu: Mapping[str, Any]) -> list[Finding]:
    out = []
    volatile, aggregate = gpu.get("ecc_uncorrected_volatile"), gpu.get("ecc_uncorrected_aggregate")
    if volatile:
        out.append(_finding(gpu, "uncorrected_ecc", ERROR,
                            f"{volatile} uncorrected ECC error(s) since the driver was last loaded",
                            "0 volatile uncorrected ECC errors",
                            "drain the node; reset the GPU (nvidia-smi -r) and rerun; if they come back, RMA the GPU"))
    elif aggregate:
        out.append(_finding(gpu, "uncorrected_ecc_lifetime", WARNING,
                            f"{aggregate} uncorrected ECC error(s) over the GPU's lifetime (none since the last load)",
                            "0 aggregate uncorrected ECC errors", "watch the count; rising counts mean an RMA"))
    if gpu.get("ecc_enabled") is False:
        out.append(_finding(gpu, "ecc_disabled", WARNING, "ECC is disabled: memory errors go undetected",
                            "ECC enabled", "enable it (nvidia-smi -e 1) and reset the GPU"))
    return out


def pending_retirement(gpu: Mapping[str, Any]) -> list[Finding]:
    out = []
    if gpu.get("retired_pages_pending"):
        out.append(_finding(gpu, "retired_pages_pending", ERROR, "page retirement is pending",
                            "no pending page retirement",
                            "reset the GPU (or reboot) so the pages are retired before the next job"))
    if gpu.get("remapped_rows_pending"):
        out.append(_finding(gpu, "remapped_rows_pending", ERROR, "a row remap is pending",
                            "no pending row remap", "reset the GPU (nvidia-smi -r) so the remap takes effect"))
    if gpu.get("remapped_rows_failed"):
        out.append(_finding(gpu, "remapped_rows_failed", ERROR, "row remapping failed: no spare rows left",
                            "no failed row remap", "drain the node and RMA the GPU"))
    return out


def pcie_link(gpu: Mapping[str, Any]) -> list[Finding]:
    """A narrower link than the GPU and slot support is always wrong; a lower generation is only
    wrong under load, since GPUs drop the link generation to save power when idle."""
    out = []
    width, width_max = gpu.get("pcie_width"), gpu.get("pcie_width_max")
    if width is not None and width_max is not None and width < width_max:
        out.append(_finding(gpu, "pcie_width_downgraded", WARNING,
                            f"PCIe link is x{width}, the GPU and slot support x{width_max}",
                            f"x{width_max}", "reseat the GPU or riser; check the slot's wiring and BIOS settings"))
    gen, gen_max = gpu.get("pcie_gen"), gpu.get("pcie_gen_max")
    if gen is not None and gen_max is not None and gen < gen_max:
        busy = bool(gpu.get("utilization_gpu_pct"))
        out.append(_finding(gpu, "pcie_gen_downgraded", WARNING if busy else INFO,
                            f"PCIe link runs at gen {gen} of {gen_max}" + ("" if busy else " while idle (power saving)"),
                            f"gen {gen_max} under load",
                            "under load this halves host transfers (CPU offload): check BIOS link speed and risers"))
    return out


def idle_throttling(gpu: Mapping[str, Any]) -> list[Finding]:
    """Clock slowdowns on an idle GPU point at the board (power brake, thermal) or its cooling."""
    reasons = gpu.get("throttle_reasons")
    if not reasons:
        return []
    hw = [name for name in reasons if name in HW_SLOWDOWN]
    sw = [name for name in reasons if name in SW_SLOWDOWN]
    idle = gpu.get("utilization_gpu_pct") == 0
    out = []
    if hw:
        out.append(_finding(gpu, "hw_slowdown", ERROR if idle else WARNING,
                            f"hardware clock slowdown ({', '.join(hw)})" + (" while idle" if idle else ""),
                            "no hardware slowdown", "check cooling, power supply and the board; drain the node "
                            "if it throttles while idle"))
    if sw and idle:
        out.append(_finding(gpu, "idle_throttling", WARNING, f"clocks held down while idle ({', '.join(sw)})",
                            "no power cap or thermal slowdown while idle",
                            "check the power limit (nvidia-smi -q -d POWER) and the GPU's temperature"))
    return out


def foreign_memory(gpu: Mapping[str, Any], own_pids: Iterable[int] = ()) -> list[Finding]:
    """Memory held by processes other than ds-doctor's: a job on this node gets less than it expects."""
    own = set(own_pids)
    processes = gpu.get("processes")
    others = [p for p in processes or [] if p.get("pid") not in own]
    out = []
    if others:
        held = sum(p.get("used_memory_bytes") or 0 for p in others)
        who = ", ".join(f"{p.get('name') or '?'} (pid {p.get('pid')})" for p in others[:5])
        out.append(_finding(gpu, "foreign_memory", WARNING,
                            f"{len(others)} other process(es) hold {held / GIB:.1f} GiB: {who}",
                            "no other process on the GPU", "stop the leftover processes before the job"))
    elif processes == [] and (gpu.get("memory_used_bytes") or 0) > UNNAMED_MEMORY_BYTES:
        out.append(_finding(gpu, "foreign_memory", WARNING,
                            f"{gpu['memory_used_bytes'] / GIB:.1f} GiB in use with no process visible here "
                            "(another container or namespace)", "no memory in use",
                            "find the holder with nvidia-smi on the host"))
    return out


RULES: tuple[Callable[[Mapping[str, Any]], list[Finding]], ...] = (
    ecc_errors, pending_retirement, pcie_link, idle_throttling,
)


def health_findings(gpu: Mapping[str, Any], own_pids: Iterable[int] | None = None) -> list[Finding]:
    """Every health rule over one GPU's reading."""
    own = {os.getpid()} if own_pids is None else set(own_pids)
    findings = [finding for rule in RULES for finding in rule(gpu)]
    return findings + foreign_memory(gpu, own)


# ---- health as case results: the report, JUnit, Prometheus, diff and the exit code read them ------

PROBE = "gpu_health"
DEVICE_FILE = "/dev/nvidiactl"


def health_results(gpus: list[Mapping[str, Any]], reason: str | None, *,
                   device_file: str = DEVICE_FILE) -> list[CaseResult]:
    """One `gpu_health[gpuN]` result per GPU: `fail` on an error finding, else `pass`. A node with
    NVIDIA device files where NVML still finds no GPU gets one `gpu_health[nvml]` error; a node
    with neither has no GPU to judge and gets no result (its hardware section says why)."""
    if not gpus:
        if reason and os.path.exists(device_file):
            return [CaseResult(probe=PROBE, case=f"{PROBE}[nvml]", scenario="smoke", level=1, world_size=1,
                               device_kind="cuda", outcome=Outcome.ERROR, duration_s=0.0,
                               reason=f"{device_file} exists but NVML finds no GPU: {reason}")]
        return []
    results = []
    for gpu in gpus:
        findings = health_findings(gpu)
        failed = [f for f in findings if f.severity == ERROR]
        results.append(CaseResult(
            probe=PROBE, case=f"{PROBE}[gpu{gpu.get('index')}]", scenario="smoke", level=1, world_size=1,
            device_kind="cuda", outcome=Outcome.FAIL if failed else Outcome.PASS, duration_s=0.0,
            reason="; ".join(f.message for f in failed) or None, findings=tuple(findings),
            notes={"gpu": gpu.get("name"), "uuid": gpu.get("uuid"), "pci_bus_id": gpu.get("pci_bus_id"),
                   "unavailable": sorted(gpu.get("unavailable") or {})}))
    return results

"""NVML readings per GPU (NVIDIA's `nvidia-ml-py`, imported as `pynvml`): each field on its own.

Any call may be unsupported on some GPU, driver or container: that field is then `None` and
`unavailable[field]` says why; a reading never raises. Without NVML or a GPU the list is empty and
the reason says which. The health rules over these readings are in `ds_doctor.checks.health`.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

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

    def read(
        self,
        fields: str | tuple[str, ...],
        call: Callable[[], Any],
        convert: Callable[[Any], Any] = lambda value: value,
    ) -> None:
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
    r.read(
        ("memory_total_bytes", "memory_used_bytes"),
        lambda: nvml.nvmlDeviceGetMemoryInfo(handle),
        lambda m: (int(m.total), int(m.used)),
    )
    r.read(
        "compute_capability",
        lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle),
        lambda cc: f"{cc[0]}.{cc[1]}",
    )
    r.read(
        ("ecc_enabled", "ecc_enabled_pending"),
        lambda: nvml.nvmlDeviceGetEccMode(handle),
        lambda mode: (bool(mode[0]), bool(mode[1])),
    )
    for counter, name in ((nvml.NVML_VOLATILE_ECC, "volatile"), (nvml.NVML_AGGREGATE_ECC, "aggregate")):
        uncorrected = functools.partial(
            nvml.nvmlDeviceGetTotalEccErrors, handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counter
        )
        r.read(f"ecc_uncorrected_{name}", uncorrected, int)
    causes = (
        ("retired_pages_sbe", nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        ("retired_pages_dbe", nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
    )
    for name, cause in causes:
        r.read(name, functools.partial(nvml.nvmlDeviceGetRetiredPages, handle, cause), len)
    r.read("retired_pages_pending", lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle), bool)
    r.read(
        (
            "remapped_rows_correctable",
            "remapped_rows_uncorrectable",
            "remapped_rows_pending",
            "remapped_rows_failed",
        ),
        lambda: nvml.nvmlDeviceGetRemappedRows(handle),
        lambda rows: (int(rows[0]), int(rows[1]), bool(rows[2]), bool(rows[3])),
    )
    r.read(
        ("throttle_mask", "throttle_reasons"),
        lambda: _throttle_mask(nvml, handle),
        lambda mask: (int(mask), throttle_names(int(mask))),
    )
    r.read(
        ("utilization_gpu_pct", "utilization_memory_pct"),
        lambda: nvml.nvmlDeviceGetUtilizationRates(handle),
        lambda u: (int(u.gpu), int(u.memory)),
    )
    r.read("temperature_c", lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU), int)
    r.read("power_draw_w", lambda: nvml.nvmlDeviceGetPowerUsage(handle), lambda mw: round(mw / 1000, 1))
    r.read(
        "power_limit_w", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle), lambda mw: round(mw / 1000, 1)
    )
    for clock, name in ((nvml.NVML_CLOCK_SM, "sm"), (nvml.NVML_CLOCK_MEM, "mem")):
        r.read(f"clock_{name}_mhz", functools.partial(nvml.nvmlDeviceGetClockInfo, handle, clock), int)
        r.read(f"clock_{name}_max_mhz", functools.partial(nvml.nvmlDeviceGetMaxClockInfo, handle, clock), int)
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
        out.append(
            {
                "pid": int(proc.pid),
                "name": _process_name(int(proc.pid)),
                "used_memory_bytes": int(used) if isinstance(used, int) else None,
            }
        )
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
            nvml = importlib.import_module("pynvml")
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
            # the system's drivers, on each GPU too
            gpus.append({**_read_gpu(nvml, index, handle), **versions})
        return gpus, None if gpus else "NVML reports no GPUs", versions
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass

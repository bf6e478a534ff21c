"""Record this node's NVML answers as a fixture for tests/test_health.py (run it on a GPU node):

    python -m tests.resources.nvml.record "what this node is" > tests/resources/nvml/<node>.json

The format is the one `AnsweringNVML` replays: per GPU, what each NVML call returned, and under
`unsupported` the calls NVML refused. UUIDs and bus ids are kept (they are not secrets; anonymize
them by hand if the node's identity matters). Review the file before committing it."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def record(nvml: Any, about: str) -> dict[str, Any]:
    nvml.nvmlInit()
    try:
        out: dict[str, Any] = {
            "_about": about,
            "driver": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver": int(nvml.nvmlSystemGetCudaDriverVersion()),
            "gpus": [],
        }
        for index in range(nvml.nvmlDeviceGetCount()):
            out["gpus"].append(_record_gpu(nvml, nvml.nvmlDeviceGetHandleByIndex(index)))
        return out
    finally:
        nvml.nvmlShutdown()


def _record_gpu(nvml: Any, h: Any) -> dict[str, Any]:
    gpu: dict[str, Any] = {"unsupported": []}

    def ask(key: str, call: str, get: Callable[[Callable[..., Any]], Any]) -> None:
        try:
            gpu[key] = get(getattr(nvml, call))
        except nvml.NVMLError:
            if call not in gpu["unsupported"]:
                gpu["unsupported"].append(call)

    ask("name", "nvmlDeviceGetName", lambda f: _text(f(h)))
    ask("uuid", "nvmlDeviceGetUUID", lambda f: _text(f(h)))
    ask("bus_id", "nvmlDeviceGetPciInfo", lambda f: _text(f(h).busId))
    ask("memory", "nvmlDeviceGetMemoryInfo", lambda f: [int(f(h).total), int(f(h).used)])
    ask("cc", "nvmlDeviceGetCudaComputeCapability", lambda f: list(f(h)))
    ask("ecc_mode", "nvmlDeviceGetEccMode", lambda f: [int(v) for v in f(h)])
    ask(
        "ecc_volatile",
        "nvmlDeviceGetTotalEccErrors",
        lambda f: int(f(h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC)),
    )
    ask(
        "ecc_aggregate",
        "nvmlDeviceGetTotalEccErrors",
        lambda f: int(f(h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC)),
    )
    ask(
        "retired_pages",
        "nvmlDeviceGetRetiredPages",
        lambda f: {str(c): [int(p) for p in f(h, c)] for c in (0, 1)},
    )
    ask("retired_pending", "nvmlDeviceGetRetiredPagesPendingStatus", lambda f: int(f(h)))
    ask("remapped_rows", "nvmlDeviceGetRemappedRows", lambda f: [int(v) for v in f(h)])
    ask("throttle", "nvmlDeviceGetCurrentClocksEventReasons", lambda f: int(f(h)))
    ask("utilization", "nvmlDeviceGetUtilizationRates", lambda f: [int(f(h).gpu), int(f(h).memory)])
    ask("temperature", "nvmlDeviceGetTemperature", lambda f: int(f(h, nvml.NVML_TEMPERATURE_GPU)))
    ask("power", "nvmlDeviceGetPowerUsage", lambda f: int(f(h)))
    ask("power_limit", "nvmlDeviceGetEnforcedPowerLimit", lambda f: int(f(h)))
    ask(
        "clocks",
        "nvmlDeviceGetClockInfo",
        lambda f: {str(c): int(f(h, c)) for c in (nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM)},
    )
    ask(
        "max_clocks",
        "nvmlDeviceGetMaxClockInfo",
        lambda f: {str(c): int(f(h, c)) for c in (nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM)},
    )
    pcie = (
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "nvmlDeviceGetCurrPcieLinkWidth",
        "nvmlDeviceGetMaxPcieLinkWidth",
    )
    try:
        gpu["pcie"] = [int(getattr(nvml, call)(h)) for call in pcie]
    except nvml.NVMLError:
        gpu["unsupported"].extend(pcie)
    ask("nvlink", "nvmlDeviceGetNvLinkState", lambda f: _links(nvml, f, h))
    ask(
        "processes",
        "nvmlDeviceGetComputeRunningProcesses",
        lambda f: [[int(p.pid), p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else None] for p in f(h)],
    )
    return gpu


def _links(nvml: Any, state: Callable[..., Any], h: Any) -> list[int]:
    links = []
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            links.append(int(state(h, link)))
        except nvml.NVMLError:
            if link == 0:
                raise
            break
    return links


if __name__ == "__main__":
    import pynvml

    json.dump(
        record(pynvml, " ".join(sys.argv[1:]) or "recorded with tests/resources/nvml/record.py"),
        sys.stdout,
        indent=1,
    )
    print()

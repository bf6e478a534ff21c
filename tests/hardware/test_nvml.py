"""The NVML reader over recorded NVML answers (every call may be refused). No GPU is needed: the answers come
from tests/resources/nvml.

`AnsweringNVML` answers NVML's calls from such a file, with pynvml's own constants and its own
`NVMLError` for refused calls, so `read_gpus` runs exactly as against the library. The real library
on this machine (no driver) is used too: it must give `gpus: []` with the reason."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from ds_doctor.hardware.nvml import read_gpus

NVML_DIR = Path(__file__).resolve().parents[1] / "resources" / "nvml"


class AnsweringNVML:
    """NVML's Python API answered from a recorded file; a call listed as unsupported raises pynvml's
    NVMLError(NVML_ERROR_NOT_SUPPORTED), as on GPUs that lack the feature."""

    def __init__(self, answers: dict[str, Any], *, fail_init: bool = False) -> None:
        self.answers = answers
        self.fail_init = fail_init
        self.open = False
        self.NVMLError = pynvml.NVMLError
        for name in dir(pynvml):
            if name.startswith("NVML_"):
                setattr(self, name, getattr(pynvml, name))

    def _gpu(self, handle: int, call: str) -> dict[str, Any]:
        gpu = self.answers["gpus"][handle]
        if call in gpu.get("unsupported", ()):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self.open = True

    def nvmlShutdown(self) -> None:
        self.open = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.answers["driver"]

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.answers["cuda_driver"]

    def nvmlDeviceGetCount(self) -> int:
        return len(self.answers["gpus"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, h: int) -> str:
        return self._gpu(h, "nvmlDeviceGetName")["name"]

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._gpu(h, "nvmlDeviceGetUUID")["uuid"]

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self._gpu(h, "nvmlDeviceGetPciInfo")["bus_id"].encode())

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        total, used = self._gpu(h, "nvmlDeviceGetMemoryInfo")["memory"]
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return tuple(self._gpu(h, "nvmlDeviceGetCudaComputeCapability")["cc"])

    def nvmlDeviceGetEccMode(self, h: int) -> list[int]:
        return self._gpu(h, "nvmlDeviceGetEccMode")["ecc_mode"]

    def nvmlDeviceGetTotalEccErrors(self, h: int, error_type: int, counter: int) -> int:
        assert error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        gpu = self._gpu(h, "nvmlDeviceGetTotalEccErrors")
        return gpu["ecc_volatile" if counter == pynvml.NVML_VOLATILE_ECC else "ecc_aggregate"]

    def nvmlDeviceGetRetiredPages(self, h: int, cause: int) -> list[int]:
        return self._gpu(h, "nvmlDeviceGetRetiredPages")["retired_pages"][str(cause)]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: int) -> int:
        return self._gpu(h, "nvmlDeviceGetRetiredPagesPendingStatus")["retired_pending"]

    def nvmlDeviceGetRemappedRows(self, h: int) -> tuple[int, int, int, int]:
        return tuple(self._gpu(h, "nvmlDeviceGetRemappedRows")["remapped_rows"])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._gpu(h, "nvmlDeviceGetCurrentClocksEventReasons")["throttle"]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:  # the name before NVML 12.2
        return self._gpu(h, "nvmlDeviceGetCurrentClocksThrottleReasons")["throttle"]

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        gpu, memory = self._gpu(h, "nvmlDeviceGetUtilizationRates")["utilization"]
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return self._gpu(h, "nvmlDeviceGetTemperature")["temperature"]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._gpu(h, "nvmlDeviceGetPowerUsage")["power"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._gpu(h, "nvmlDeviceGetEnforcedPowerLimit")["power_limit"]

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return self._gpu(h, "nvmlDeviceGetClockInfo")["clocks"][str(clock)]

    def nvmlDeviceGetMaxClockInfo(self, h: int, clock: int) -> int:
        return self._gpu(h, "nvmlDeviceGetMaxClockInfo")["max_clocks"][str(clock)]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self._gpu(h, "nvmlDeviceGetCurrPcieLinkGeneration")["pcie"][0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return self._gpu(h, "nvmlDeviceGetMaxPcieLinkGeneration")["pcie"][1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self._gpu(h, "nvmlDeviceGetCurrPcieLinkWidth")["pcie"][2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return self._gpu(h, "nvmlDeviceGetMaxPcieLinkWidth")["pcie"][3]

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        links = self._gpu(h, "nvmlDeviceGetNvLinkState")["nvlink"]
        if link >= len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=used)
            for pid, used in self._gpu(h, "nvmlDeviceGetComputeRunningProcesses")["processes"]
        ]


def answers(name: str) -> dict[str, Any]:
    return json.loads((NVML_DIR / name).read_text())


def test_the_real_nvml_without_a_driver_gives_no_gpus_and_the_reason() -> None:
    gpus, reason, versions = read_gpus()
    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this machine has an NVIDIA driver")
    assert (
        gpus == []
        and "NVML could not initialise" in reason
        and versions == {"driver": None, "cuda_driver": None}
    )


def test_init_failure_and_refused_calls_never_raise() -> None:
    gpus, reason, _ = read_gpus(AnsweringNVML(answers("t4_container.json"), fail_init=True))
    assert gpus == [] and "Driver Not Loaded" in reason
    nvml = AnsweringNVML(answers("t4_container.json"))
    gpus, reason, versions = read_gpus(nvml)
    assert reason is None and not nvml.open  # shut down again
    assert versions == {"driver": "535.161.08", "cuda_driver": "12.2"}
    (t4,) = gpus
    for field in (
        "remapped_rows_correctable",
        "remapped_rows_pending",
        "nvlink",
        "power_draw_w",
        "power_limit_w",
        "processes",
    ):
        assert t4[field] is None and t4["unavailable"][field] == "NVMLError_NotSupported: Not Supported", (
            field
        )
    assert (t4["retired_pages_sbe"], t4["retired_pages_dbe"], t4["retired_pages_pending"]) == (2, 1, True)
    assert t4["compute_capability"] == "7.5" and t4["throttle_reasons"] == ["sw_power_cap"]
    assert (t4["driver"], t4["cuda_driver"]) == ("535.161.08", "12.2")
    assert (t4["clock_sm_mhz"], t4["clock_sm_max_mhz"]) == (585, 1590)
    # an older driver without the clocks-event call: the throttle-reasons call answers instead
    older = answers("t4_container.json")
    older["gpus"][0]["unsupported"].append("nvmlDeviceGetCurrentClocksEventReasons")
    (t4,) = read_gpus(AnsweringNVML(older))[0]
    assert t4["throttle_reasons"] == ["sw_power_cap"] and "throttle_reasons" not in t4["unavailable"]


def test_every_field_is_read_on_a_full_node() -> None:
    gpus, _, versions = read_gpus(AnsweringNVML(answers("h100_node_sick.json")))
    assert versions["cuda_driver"] == "12.4" and len(gpus) == 4
    first = gpus[0]
    assert first["pci_bus_id"] == "00000000:18:00.0" and first["memory_total_bytes"] == 85520809984
    assert (first["ecc_enabled"], first["ecc_uncorrected_volatile"], first["remapped_rows_pending"]) == (
        True,
        0,
        False,
    )
    assert (first["pcie_gen"], first["pcie_gen_max"], first["pcie_width"], first["pcie_width_max"]) == (
        5,
        5,
        16,
        16,
    )
    assert (first["power_draw_w"], first["power_limit_w"], first["temperature_c"]) == (612.0, 700.0, 64)
    assert len(first["nvlink"]) == 18 and all(link["active"] for link in first["nvlink"])
    assert first["processes"] == [
        {"pid": 4242, "name": first["processes"][0]["name"], "used_memory_bytes": 72000000000}
    ]
    assert set(first["unavailable"]) == {"retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending"}
    assert gpus[2]["throttle_reasons"] == ["gpu_idle", "hw_power_brake_slowdown"]
    assert gpus[2]["nvlink"][16] == {"link": 16, "active": False}


@pytest.mark.parametrize("name", ["h100_node_sick.json", "t4_container.json", "h100_x1_firecracker.json"])
def test_the_recorder_writes_what_the_replayer_reads(name: str) -> None:
    """tests/resources/nvml/record.py (for a GPU session) round-trips every fixture through AnsweringNVML."""
    from tests.resources.nvml.record import record

    original = answers(name)
    recorded = record(AnsweringNVML(original), original["_about"])
    for gpu in original["gpus"]:
        gpu.setdefault("unsupported", [])
    for gpu in recorded["gpus"]:
        gpu["unsupported"] = sorted(gpu["unsupported"])
    for gpu in original["gpus"]:
        gpu["unsupported"] = sorted(gpu["unsupported"])
    assert recorded == original


def test_a_recorded_h100_reads_as_the_live_run_read_it() -> None:
    """h100_x1_firecracker.json was recorded by record.py on a real H100 (2026-11-23, docs/gpu-runs.md); the
    live `ds-doctor run` there reported these same values, and these refusals, for that GPU."""
    gpus, reason, versions = read_gpus(AnsweringNVML(answers("h100_x1_firecracker.json")))
    assert reason is None and len(gpus) == 1 and versions
    gpu = gpus[0]
    assert (gpu["name"], gpu["compute_capability"], gpu["memory_total_bytes"]) == (
        "NVIDIA H100 80GB HBM3",
        "9.0",
        85520809984,
    )
    assert (gpu["pcie_gen"], gpu["pcie_width"], gpu["throttle_reasons"]) == (5, 16, ["gpu_idle"])
    assert (
        gpu["ecc_enabled"] and gpu["ecc_uncorrected_volatile"] == 0 and gpu["remapped_rows_pending"] is False
    )
    # that VM's driver refuses retired pages and NVLink (an SXM H100 behind one PCIe function): missing, not failing
    assert set(gpu["unavailable"]) == {
        "retired_pages_sbe",
        "retired_pages_dbe",
        "retired_pages_pending",
        "nvlink",
    }
    assert gpu["nvlink"] is None and gpu["driver"] == "580.159.04" and gpu["cuda_driver"] == "13.0"

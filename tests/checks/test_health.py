"""GPU health rules as pure functions over NVML readings (recorded answers replayed through
tests.hardware.test_nvml.AnsweringNVML), and the results they make."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ds_doctor.checks import health
from ds_doctor.hardware.nvml import read_gpus, throttle_names
from ds_doctor.reports.model import Outcome, Severity, validate
from tests.hardware.test_nvml import AnsweringNVML, answers

ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


def by_rule(findings: list[Any]) -> dict[str, str]:
    return {f.invariant: f.severity for f in findings}


def test_rules_over_a_sick_node() -> None:
    gpus, _, _ = read_gpus(AnsweringNVML(answers("h100_node_sick.json")))
    busy, remap, link, leftover = (health.health_findings(g, own_pids={4242}) for g in gpus)
    assert busy == []  # GPU 0 runs our own job (pid 4242) flat out: nothing to say
    assert by_rule(remap) == {
        "uncorrected_ecc": ERROR,
        "remapped_rows_pending": ERROR,
        "pcie_gen_downgraded": INFO,
    }
    assert by_rule(link) == {"pcie_width_downgraded": WARNING, "hw_slowdown": ERROR}
    assert "x8, the GPU and slot support x16" in link[0].message and "while idle" in link[1].message
    assert by_rule(leftover) == {"foreign_memory": WARNING}
    assert "30.0 GiB" in leftover[0].message and "pid 999999" in leftover[0].message
    results = health.health_results(gpus, None)
    assert [r.outcome for r in results] == [Outcome.PASS, Outcome.FAIL, Outcome.FAIL, Outcome.PASS]
    assert [r.case for r in results] == [f"gpu_health[gpu{i}]" for i in range(4)]
    # pid 4242 is not this process: seen from the doctor it is foreign memory (a warning, the case passes)
    assert by_rule(list(results[0].findings)) == {"foreign_memory": WARNING}
    assert "row remap is pending" in results[1].reason and "uncorrected ECC" in results[1].reason


def test_a_recorded_healthy_h100_passes_with_what_it_could_not_read_listed() -> None:
    gpus, _, _ = read_gpus(AnsweringNVML(answers("h100_x1_firecracker.json")))
    assert health.health_findings(gpus[0], own_pids=set()) == []
    [result] = health.health_results(gpus, None)
    assert result.outcome == Outcome.PASS and result.findings == ()
    assert result.notes["unavailable"] == [
        "nvlink",
        "retired_pages_dbe",
        "retired_pages_pending",
        "retired_pages_sbe",
    ]


def test_rules_one_by_one() -> None:
    base: dict[str, Any] = {"index": 0, "utilization_gpu_pct": 0, "processes": [], "memory_used_bytes": 0}
    assert health.health_findings(base, own_pids=()) == []
    assert by_rule(
        health.ecc_errors({**base, "ecc_uncorrected_aggregate": 3, "ecc_uncorrected_volatile": 0})
    ) == {"uncorrected_ecc_lifetime": WARNING}
    assert by_rule(health.ecc_errors({**base, "ecc_enabled": False})) == {"ecc_disabled": WARNING}
    assert by_rule(
        health.pending_retirement({**base, "retired_pages_pending": True, "remapped_rows_failed": True})
    ) == {"retired_pages_pending": ERROR, "remapped_rows_failed": ERROR}
    # generation below max: power saving when idle (info), a real downgrade under load (warning)
    assert by_rule(health.pcie_link({**base, "pcie_gen": 3, "pcie_gen_max": 5})) == {
        "pcie_gen_downgraded": INFO
    }
    assert by_rule(
        health.pcie_link({**base, "utilization_gpu_pct": 80, "pcie_gen": 3, "pcie_gen_max": 5})
    ) == {"pcie_gen_downgraded": WARNING}
    # unknown (None) fields never fire a rule
    assert (
        health.pcie_link(
            {**base, "pcie_width": None, "pcie_width_max": 16, "pcie_gen": 4, "pcie_gen_max": None}
        )
        == []
    )
    assert by_rule(health.idle_throttling({**base, "throttle_reasons": ["gpu_idle", "sw_power_cap"]})) == {
        "idle_throttling": WARNING
    }
    assert (
        health.idle_throttling({**base, "utilization_gpu_pct": 99, "throttle_reasons": ["sw_power_cap"]})
        == []
    )
    assert by_rule(
        health.idle_throttling({**base, "utilization_gpu_pct": 99, "throttle_reasons": ["hw_slowdown"]})
    ) == {"hw_slowdown": WARNING}
    assert throttle_names(0x81) == ["gpu_idle", "hw_power_brake_slowdown"]
    # memory in use with no process visible (another container): a warning; processes unknown: nothing
    assert by_rule(health.foreign_memory({**base, "memory_used_bytes": 5 << 30})) == {
        "foreign_memory": WARNING
    }
    assert health.foreign_memory({**base, "processes": None, "memory_used_bytes": 5 << 30}) == []
    assert (
        health.foreign_memory(
            {**base, "processes": [{"pid": os.getpid(), "used_memory_bytes": 1}]}, own_pids={os.getpid()}
        )
        == []
    )


def test_a_node_with_device_files_but_no_nvml_is_an_error(tmp_path: Path) -> None:
    device_file = tmp_path / "nvidiactl"
    assert health.health_results([], "NVML could not initialise", device_file=str(device_file)) == []
    device_file.write_text("")
    (result,) = health.health_results([], "NVML could not initialise", device_file=str(device_file))
    assert result.outcome == Outcome.ERROR and "NVML finds no GPU" in result.reason


def test_a_run_directory_report_judges_the_gpus_it_recorded(tmp_path: Path) -> None:
    """`ds-doctor report RUN_DIR` (a killed run) gives the same health results `run` gives, -k included."""
    from ds_doctor.hardware.env import collect_environment
    from ds_doctor.run.recover import report_from_run_dir
    from ds_doctor.rundir import Manifest, RunDir

    env, hardware = collect_environment()
    hardware["gpus"], _, _ = read_gpus(AnsweringNVML(answers("h100_node_sick.json")))
    RunDir(tmp_path).write_manifest(
        Manifest(
            started_at="2026-11-21T03:30:00Z",
            level=2,
            argv=("run",),
            env=env,
            hardware=hardware,
            planned=(),
            skips=(),
            keyword="gpu1 or gpu2",
        )
    )
    report, warnings = report_from_run_dir(tmp_path)
    assert warnings == []
    validate(report.to_dict())
    assert [(r.case, r.outcome) for r in report.results] == [
        ("gpu_health[gpu1]", Outcome.FAIL),
        ("gpu_health[gpu2]", Outcome.FAIL),
    ]

"""Prometheus textfile metrics: parsed back with prometheus_client's own text-format parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds_doctor.cli import main
from ds_doctor.reports.model import Outcome
from ds_doctor.reports.prometheus import render_prometheus
from tests.reports.samples import a_report, case, every_outcome

parser = pytest.importorskip("prometheus_client.parser")


def families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in parser.text_string_to_metric_families(text)}


def test_metrics_parse_and_carry_outcomes_findings_and_measures() -> None:
    results = [
        *every_outcome(),
        case(Outcome.PASS, 'quote"and\\slash', probe="comm", world_size=2, measures={"busbw_gbps": 12.5}),
        case(Outcome.PASS, "one-rank", probe="comm", measures={"busbw_gbps": 0.0}),
    ]
    metrics = families(render_prometheus(a_report(results)))
    counts = {s.labels["outcome"]: s.value for s in metrics["ds_doctor_cases"]}
    assert counts["fail"] == 1 and counts["error"] == 1 and counts["timeout"] == 1 and counts["pass"] == 3
    # one series per case, the outcome it had (not one per outcome: 7 a case, a million across a fleet)
    assert len(metrics["ds_doctor_case_outcome"]) == len(results)
    (failed,) = [
        s for s in metrics["ds_doctor_case_outcome"] if s.labels["case"] == "zero_offload[z3-opt-bf16-ws2]"
    ]
    assert failed.labels["outcome"] == "fail" and failed.value == 1.0
    assert all(s.labels["host"] == "node1" and s.value == 1 for s in metrics["ds_doctor_case_outcome"])
    findings = {s.labels["severity"]: s.value for s in metrics["ds_doctor_findings"]}
    assert findings["error"] == sum(f.is_error for r in results for f in r.findings) >= 1
    (bandwidth,) = metrics["ds_doctor_busbw_gbps"]
    # escaped, parsed back
    assert bandwidth.value == 12.5 and bandwidth.labels["case"] == 'comm[quote"and\\slash-ws2]'
    # (the one-rank case has no busbw sample: a collective over one rank moves nothing, its 0 means nothing)
    assert "ds_doctor_tflops" not in metrics  # nothing measured, no family


def test_run_writes_the_textfile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prom = tmp_path / "ds_doctor.prom"
    assert main(["run", "--level", "1", "--out", str(tmp_path), "--prometheus", str(prom)]) == 0
    assert "ds_doctor_run_duration_seconds" in families(prom.read_text())
    assert main(["run", "--level", "1", "--out", str(tmp_path), "--prometheus", str(tmp_path)]) == 2


def test_gpu_health_findings_become_one_sample_per_rule() -> None:
    from ds_doctor.checks.health import health_results
    from ds_doctor.hardware.nvml import read_gpus
    from tests.hardware.test_nvml import AnsweringNVML, answers

    gpus, _, _ = read_gpus(AnsweringNVML(answers("h100_node_sick.json")))
    metrics = families(render_prometheus(a_report(health_results(gpus, None))))
    rules = {
        (s.labels["gpu"], s.labels["rule"], s.labels["severity"])
        for s in metrics["ds_doctor_gpu_health_finding"]
    }
    assert ("gpu_health[gpu1]", "remapped_rows_pending", "error") in rules
    assert ("gpu_health[gpu2]", "pcie_width_downgraded", "warning") in rules
    fails = {
        s.labels["case"]
        for s in metrics["ds_doctor_case_outcome"]
        if s.labels["outcome"] == "fail" and s.value
    }
    assert fails == {"gpu_health[gpu1]", "gpu_health[gpu2]"}

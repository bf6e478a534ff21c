"""`ds-doctor diff` rules over reports built the way `run` builds them (the end-to-end test diffs two
real runs): which changes regress, which are only reported, and the tolerance."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from ds_doctor.checks.baseline import diff_reports
from ds_doctor.hardware.nvml import read_gpus
from ds_doctor.reports.diff import render_diff
from ds_doctor.reports.model import CaseResult, Finding, Outcome, Report, Severity
from ds_doctor.run.build import build_report, utc_now
from tests.hardware.test_nvml import AnsweringNVML, answers

GPUS, _, DRIVERS = read_gpus(AnsweringNVML(answers("h100_node_sick.json")))


def result(case: str, outcome: Outcome = Outcome.PASS, world_size: int = 8, **measures: float) -> CaseResult:
    return CaseResult(
        probe=case.split("[")[0],
        case=case,
        scenario="smoke",
        level=2,
        world_size=world_size,
        device_kind="cuda",
        outcome=outcome,
        duration_s=1.0,
        measures=measures,
    )


def report(
    results: list[CaseResult],
    *,
    gpus: list[dict[str, Any]] = GPUS,
    packages: dict[str, str] | None = None,
    driver: str | None = "550.54.15",
) -> Report:
    now = utc_now()
    env = {
        "python": "3.11.7",
        "packages": packages or {"torch": "2.11.0", "deepspeed": "0.19.8"},
        "driver": driver,
        "cuda_driver": "12.4",
    }
    hardware = {"host": "gpu-node-17", "cpus": 64, "memory_bytes": 1 << 40, "gpus": gpus, "gpus_reason": None}
    return build_report(
        started=now, finished=now, level=2, argv=(), env=env, hardware=hardware, results=results, run_dir=None
    )


BASE = [
    result("comm[all_reduce-ws8]", busbw_gbps=360.0, algbw_gbps=205.7),
    result("compute[matmul-bf16-ws8]", tflops=700.0),
    result("zero_offload[z3-opt+param-bf16-ws2]"),
]


def kinds(diff: Any) -> dict[tuple[str, str], bool]:
    return {(c.kind, c.subject): c.regression for c in diff.changes}


def test_identical_reports_have_no_change() -> None:
    diff = diff_reports(report(BASE), report(BASE))
    assert diff.changes == () and not diff.regressions
    assert "no regression" in render_diff(diff) and "Nothing changed." in render_diff(diff)


def test_a_drop_beyond_the_tolerance_regresses_and_one_within_does_not() -> None:
    # -8.6 %
    new = [
        result("comm[all_reduce-ws8]", busbw_gbps=320.0, algbw_gbps=182.9),  # -11.1 %
        result("compute[matmul-bf16-ws8]", tflops=640.0),
        BASE[2],
    ]
    diff = diff_reports(report(BASE), report(new))
    assert kinds(diff) == {
        ("measure", "comm[all_reduce-ws8] busbw_gbps"): True,
        ("measure", "comm[all_reduce-ws8] algbw_gbps"): True,
    }
    assert diff.regressions[0].detail == "-11.1% (tolerance 10%)"
    assert not diff_reports(report(BASE), report(new), tolerance_pct=12).regressions
    assert len(diff_reports(report(BASE), report(new), tolerance_pct=5).regressions) == 3
    faster = [result("comm[all_reduce-ws8]", busbw_gbps=420.0, algbw_gbps=240.0), *BASE[1:]]
    # reported only
    assert {c.regression for c in diff_reports(report(BASE), report(faster)).changes} == {False}
    with pytest.raises(ValueError, match="tolerance"):
        diff_reports(report(BASE), report(BASE), tolerance_pct=100)


def test_measures_are_compared_only_where_they_mean_something() -> None:
    """A one-rank collective's bandwidth is no link's; relative error is context, never a regression."""
    one_rank = [
        result("comm[all_reduce-ws1]", world_size=1, busbw_gbps=0.0, algbw_gbps=5.0),
        result("compute[matmul-bf16-ws1]", world_size=1, relative_error=1e-3, tflops=700.0),
    ]
    slower = [
        result("comm[all_reduce-ws1]", world_size=1, busbw_gbps=0.0, algbw_gbps=1.0),
        result("compute[matmul-bf16-ws1]", world_size=1, relative_error=5e-3, tflops=600.0),
    ]
    assert kinds(diff_reports(report(one_rank), report(slower))) == {
        ("measure", "compute[matmul-bf16-ws1] tflops"): True
    }


def test_outcomes_and_findings() -> None:
    error = Finding(
        "collective_result", Severity.ERROR, "all_reduce of 1073741824 B: 1 of 268435456 elements wrong"
    )
    # pass -> skip: reported only
    new = [  # zero_offload is gone
        dataclasses.replace(BASE[0], outcome=Outcome.FAIL, reason="wrong", findings=(error,)),
        dataclasses.replace(BASE[1], outcome=Outcome.SKIP, reason="needs cuda"),
        result("comm[broadcast-ws8]", Outcome.ERROR),  # a new case that errors
        result("compute[memory-ws8]"),  # a new case that passes
    ]
    diff = diff_reports(report(BASE), report(new))
    assert kinds(diff) == {
        ("outcome", "comm[all_reduce-ws8]"): True,
        ("outcome", "compute[matmul-bf16-ws8]"): False,
        ("outcome", "comm[broadcast-ws8]"): True,
        ("case", "compute[memory-ws8]"): False,
        ("case", "zero_offload[z3-opt+param-bf16-ws2]"): False,
        ("finding", "comm[all_reduce-ws8]"): True,
    }
    fixed = diff_reports(report(new), report(BASE))  # the other way round: failures that went away
    assert kinds(fixed)[("outcome", "comm[all_reduce-ws8]")] is False
    warning = Finding("foreign_memory", Severity.WARNING, "GPU 3: 1 other process(es) hold 30.0 GiB")
    warned = diff_reports(
        report(BASE), report([dataclasses.replace(BASE[0], findings=(warning,)), *BASE[1:]])
    )
    assert kinds(warned) == {("finding", "comm[all_reduce-ws8]"): False}


def test_hardware_and_versions() -> None:
    fewer = GPUS[:3]
    smaller = [dict(GPUS[0], memory_total_bytes=GPUS[0]["memory_total_bytes"] - (2 << 30)), *GPUS[1:]]
    swapped = [dict(GPUS[0], uuid="GPU-00000000-0000-4000-8000-000000000000"), *GPUS[1:]]
    assert kinds(diff_reports(report(BASE), report(BASE, gpus=fewer))) == {("hardware", "GPU count"): True}
    assert kinds(diff_reports(report(BASE), report(BASE, gpus=smaller))) == {
        ("hardware", "GPU 0 memory"): True
    }
    assert kinds(diff_reports(report(BASE), report(BASE, gpus=swapped))) == {
        ("hardware", "GPU 0 UUID"): False
    }
    upgraded = report(
        BASE, packages={"torch": "2.12.0", "deepspeed": "0.19.8", "accelerate": "1.15.0"}, driver="560.35.03"
    )
    assert kinds(diff_reports(report(BASE), upgraded)) == {
        ("version", "torch"): False,
        ("version", "accelerate"): False,
        ("hardware", "driver"): False,
    }
    text = render_diff(diff_reports(report(BASE), report(BASE, gpus=fewer)))
    assert "REGRESSED" in text and "| REGRESSION | GPU count | 4 | 3 |" in text


def test_the_diff_json_round_trips(tmp_path: Path) -> None:
    diff = diff_reports(report(BASE), report(BASE, gpus=GPUS[:1]))
    data = json.loads(json.dumps(diff.to_dict()))
    assert data["regressed"] is True and data["changes"][0]["kind"] == "hardware"


def test_a_node_that_recovered_is_no_regression_and_exits_0(tmp_path: Path) -> None:
    """The night the node recovered: errors became passes and designed reproductions (xfail, with the findings they
    exist to show), and CPU bandwidth moved by gloo's noise. Nothing pages."""
    from ds_doctor.cli import main

    designed = Finding("param_name_map", Severity.ERROR, "emb.weight is stale (reproduced on purpose)")
    cpu = {"device_kind": "cpu", "world_size": 2}
    sick = [
        dataclasses.replace(result("frozen_param_names[z2-set-tensor-ws2]", Outcome.ERROR), **cpu),
        dataclasses.replace(result("zero_offload[z3-opt+param-bf16-ws2]", Outcome.ERROR), **cpu),
        dataclasses.replace(result("comm[broadcast-ws2]", busbw_gbps=4.54, algbw_gbps=4.54), **cpu),
    ]
    # -60 %: measured noise
    healthy = [
        dataclasses.replace(sick[0], outcome=Outcome.XFAIL, findings=(designed,)),
        dataclasses.replace(sick[1], outcome=Outcome.PASS),
        dataclasses.replace(sick[2], measures={"busbw_gbps": 1.80, "algbw_gbps": 1.80}),
    ]
    diff = diff_reports(report(sick), report(healthy))
    assert not diff.regressions
    assert {c.subject: c.detail for c in diff.changes if c.kind == "outcome"} == {
        "frozen_param_names[z2-set-tensor-ws2]": "recovered",
        "zero_offload[z3-opt+param-bf16-ws2]": "recovered",
    }
    paths = []
    for name, results in (("sick", sick), ("healthy", healthy)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(report(results).to_json())
    assert main(["diff", str(paths[0]), str(paths[1])]) == 0


def test_a_cpu_measure_is_compared_at_its_measured_noise_and_says_so() -> None:
    cpu = {"device_kind": "cpu", "world_size": 2}
    base = [dataclasses.replace(result("comm[all_reduce-ws2]", busbw_gbps=1.2, algbw_gbps=1.2), **cpu)]
    halved = [dataclasses.replace(base[0], measures={"busbw_gbps": 0.6, "algbw_gbps": 0.6})]
    collapsed = [dataclasses.replace(base[0], measures={"busbw_gbps": 0.2, "algbw_gbps": 0.2})]
    assert not diff_reports(report(base), report(halved)).regressions  # -50 %: within gloo's noise
    (change, _) = diff_reports(report(base), report(collapsed)).regressions  # -83 %: beyond it
    assert change.detail == "-83.3% (on CPU: tolerance 70%, its measured noise)"
    gpu = [result("comm[all_reduce-ws8]", busbw_gbps=360.0)]  # a GPU node keeps the tolerance asked for
    assert diff_reports(report(gpu), report([result("comm[all_reduce-ws8]", busbw_gbps=300.0)])).regressions

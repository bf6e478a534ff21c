"""Nodes' reports for the fleet tests, built by the one report builder from recorded NVML readings of real GPUs
(tests/resources/nvml) and planted case results."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

from ds_doctor.checks.health import health_results
from ds_doctor.hardware.nvml import read_gpus
from ds_doctor.reports.model import CaseResult, Outcome, Report
from ds_doctor.run.build import build_report, write_reports
from tests.hardware.test_nvml import AnsweringNVML, answers
from tests.reports.samples import NOW, case

HEALTHY, SICK, T4 = "h100_x1_firecracker.json", "h100_node_sick.json", "t4_container.json"
COMM, COMPUTE = "comm[all_reduce-ws8]", "compute[matmul-bf16-ws1]"


def comm(busbw: float, outcome: Outcome = Outcome.PASS, **fields: Any) -> CaseResult:
    return case(
        outcome,
        "all_reduce",
        probe="comm",
        world_size=8,
        measures={"busbw_gbps": busbw, "algbw_gbps": round(busbw / 1.75, 4)},
        **fields,
    )


def compute(tflops: float) -> CaseResult:
    return case(
        Outcome.PASS, "matmul-bf16", probe="compute", measures={"tflops": tflops, "relative_error": 1e-3}
    )


def node(  # noqa: PLR0913 (a sample's every knob, keyword-only)
    host: str,
    *,
    recording: str = HEALTHY,
    deepspeed: str = "0.17.6",
    busbw: float = 100.0,
    tflops: float = 700.0,
    started: dt.datetime = NOW,
    results: tuple[CaseResult, ...] = (),
    variables: dict[str, str] | None = None,
    argv: tuple[str, ...] = ("run", "--level", "2"),
) -> Report:
    """A node's report as `run` builds it: NVML's readings in the hardware section and as GPU health results, the
    environment's versions, a comm and a compute case with their measures."""
    gpus, reason, drivers = read_gpus(AnsweringNVML(answers(recording)))
    env = {
        "python": "3.11.7",
        "packages": {"torch": "2.5.1", "deepspeed": deepspeed, "accelerate": "1.2.0"},
        "cuda": "12.4",
        "nccl": "2.21.5",
        **drivers,
        "variables": {"NCCL_IB_HCA": "mlx5", **(variables or {})},
    }
    hardware = {"host": host, "cpus": 64, "memory_bytes": 1 << 40, "gpus": gpus, "gpus_reason": reason}
    cases = [*health_results(gpus, reason), comm(busbw), compute(tflops), *results]
    return build_report(
        started=started,
        finished=started + dt.timedelta(minutes=4),
        level=2,
        argv=argv,
        env=env,
        hardware=hardware,
        results=cases,
        run_dir=None,
    )


def with_shared_gpu(
    result: CaseResult, how: str = "2 ranks on 1 GPU(s): NCCL, a distinct NCCL_HOSTID per rank"
) -> CaseResult:
    """`result` as a case whose ranks shared one GPU."""
    return dataclasses.replace(result, shared_gpu=how)


def write_nightly(state_dir: Path, report: Report) -> Path:
    """The report where the nightly wrapper keeps it (`<STATE_DIR>/<host>/reports/`), named as `run` names it."""
    folder = state_dir / str(report.hardware.host) / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    return write_reports(report, folder)["json"]

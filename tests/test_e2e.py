"""End to end through the real CLI and real torchrun launches (slow: marked multirank)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reports.model import validate
from tests.conftest import requires_deepspeed

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.multirank


def ds_doctor(*args: str, extra_env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(extra_env or {})}
    return subprocess.run([sys.executable, "-m", "doctor.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


def read_report(out: Path) -> dict:
    reports = sorted(out.glob("ds-doctor-*.json"))
    assert len(reports) == 1, reports
    data = json.loads(reports[0].read_text())
    validate(data)
    assert reports[0].with_suffix(".md").exists()
    return data


@requires_deepspeed
def test_zero_offload_level3_every_cpu_case_passes(tmp_path: Path) -> None:
    proc = ds_doctor("run", "--level", "3", "-k", "zero_offload", "--out", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    data = read_report(tmp_path)
    assert json.loads(proc.stdout) == data  # --json prints the same report
    results = {r["case"]: r for r in data["results"]}
    assert len(results) == 28 and {r["outcome"] for r in results.values()} == {"pass"}
    assert {r["world_size"] for r in results.values()} == {1, 2}
    for result in results.values():
        assert result["known_issue"]["id"] == "ds_z3_offload_gradnorm_device_mismatch"
        assert result["known_issue"]["verdict"] == "not_affected"  # deepspeed 0.19.8 is outside 0.14.1-0.14.2
        assert result["notes"]["unscale_and_clip_grads_calls"] >= 1

    s2 = results["zero_offload[z3-opt+param-bf16-ws2]"]
    partitions = [r for r in s2["device_map"] if r["role"] == "fp32_partition" and r["stage"] == "after_step"]
    assert sorted(r["rank"] for r in partitions) == [0, 1] and {r["device"] for r in partitions} == {"cpu"}
    operands = {(r["rank"], r["path"]) for r in s2["device_map"] if r["role"] == "clip_operand"}
    for rank in (0, 1):
        assert (rank, "unscale_and_clip_grads[0].total_norm") in operands
        assert (rank, "unscale_and_clip_grads[0].grads[0]") in operands
    assert {r["stage"] for r in s2["device_map"]} == {"after_init", "after_backward", "at_clip", "after_step"}
    assert [f["invariant"] for f in s2["findings"]] == ["grad_accum_dtype", "grad_accum_dtype"]  # a warning per rank


def test_hang_and_crash_are_attributed_and_the_rest_still_runs(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = ds_doctor("run", "--level", "3", "-k", "faults", "--out", str(tmp_path),
                     extra_env={"DS_DOCTOR_EXTRA_PROBES": "tests.resources.fault_probes"}, timeout=300)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    results = {r["case"]: r for r in read_report(tmp_path)["results"]}
    assert results["faults[ok-ws2]"]["outcome"] == "pass"
    assert results["faults[ok-after-ws2]"]["outcome"] == "pass"

    hang = results["faults[hang-ws2]"]
    assert hang["outcome"] == "timeout"
    stuck = {r["rank"]: r for r in hang["ranks"]}
    assert stuck[1]["outcome"] == "timeout" and stuck[1]["stage"] == "stuck on purpose"
    assert "timed out after 6 s on rank 1" in hang["reason"]

    killed = results["faults[sigkill-ws2]"]
    assert killed["outcome"] == "error"
    rank1 = {r["rank"]: r for r in killed["ranks"]}[1]
    assert rank1["signal"] == "SIGKILL" and rank1["exit_code"] == -9 and rank1["stage"] == "about to be killed"
    assert killed["known_issue"]["id"] == "torchrun_child_sigkill"

    raised = results["faults[raise-ws2]"]
    assert raised["outcome"] == "error" and "ValueError: planted failure on rank 1" in raised["reason"]
    assert "Traceback" in {r["rank"]: r for r in raised["ranks"]}[1]["traceback"]
    assert elapsed < 120, f"the run took {elapsed:.0f} s"

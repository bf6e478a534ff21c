"""`watch` / `DoctorCallback` in real jobs under a real torchrun (2 ranks, gloo on CPU): a DeepSpeed ZeRO-3 loop with
the optimizer offloaded, an Accelerate loop and an HF Trainer run (tests/resources/watch_jobs.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ds_doctor.reports.model import Outcome, Report
from tests.bounds import GENEROUS_RUN_S
from tests.conftest import requires_accelerate, requires_deepspeed

pytestmark = pytest.mark.multirank

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "resources" / "watch_jobs.py"


def run_jobs(
    tmp_path: Path, *specs: tuple[str, str, str], extra_env: dict[str, str] | None = None
) -> list[tuple[list[dict[str, Any]], Path]]:
    """Each (job, plant, raise_on) in turn in one torchrun launch (tests/resources/watch_jobs.py): each its rank
    results and its folder."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(extra_env or {})}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(JOBS),
    ]
    outs = []
    for job, plant, raise_on in specs:
        outs.append(tmp_path / f"{job}-{plant}")
        outs[-1].mkdir()
        command += [job, plant, str(outs[-1]), raise_on]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return [([json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)], out) for out in outs]


def run_job(
    tmp_path: Path,
    job: str,
    plant: str = "none",
    raise_on: str = "none",
    extra_env: dict[str, str] | None = None,
) -> tuple[list[dict[str, Any]], Path]:
    (ran,) = run_jobs(tmp_path, (job, plant, raise_on), extra_env=extra_env)
    return ran


def report_of(path: Path) -> Report:
    return Report.from_dict(json.loads(path.read_text()))


def cases(report: Report) -> dict[str, Any]:
    return {result.case: result for result in report.results}


def renders(path: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "ds_doctor.cli", "report", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    markdown = next(path.parent.glob("*-report.md")).read_text()
    assert "watch[after_prepare]" in markdown
    return markdown


def assert_healthy(report: Report) -> None:
    assert report.results and all(r.outcome == Outcome.PASS for r in report.results), [
        (r.case, r.reason) for r in report.results
    ]
    assert not [f for r in report.results for f in r.findings if f.is_error]
    assert all(r.world_size == 2 and r.probe == "watch" for r in report.results)


@requires_deepspeed
def test_a_zero3_offload_job_watched_healthy_then_planted_s1_stopped_before_its_save(tmp_path: Path) -> None:
    # healthy, then planted, in one launch
    (ranks, out), (planted, bad) = run_jobs(
        tmp_path, ("deepspeed", "none", "none"), ("deepspeed", "s1", "error")
    )
    assert all(r["error"] is None and r["saved"] and all(r["restored"].values()) for r in ranks), ranks
    report = report_of(out / "watch.json")
    assert_healthy(report)
    assert list(cases(report)) == [
        "watch[after_prepare]",
        "watch[step 1]",
        "watch[step 2]",
        "watch[step 4]",
        "watch[before_save step 4]",
        "watch[after_load]",
    ]
    step = cases(report)["watch[step 1]"]
    # clip operands included
    assert step.notes["target"] == "deepspeed" and min(step.notes["records_per_rank"]) > 20
    assert "watch[before_save step 4]" in renders(out / "watch.json")

    for rank in planted:  # DoctorError on every rank, before save_checkpoint wrote anything
        assert (
            rank["error"].startswith("DoctorError: ds-doctor at before_save step 4") and not rank["saved"]
        ), planted
        assert all(rank["restored"].values())  # close() put the engine's own methods back
    save = cases(report_of(bad / "watch.json"))["watch[before_save step 4]"]
    assert save.outcome == Outcome.FAIL and save.known_issue.id == "ds_frozen_param_not_in_param_names"
    assert sorted((f.invariant, f.rank) for f in save.findings) == [
        ("param_name_map", 0),
        ("param_name_map", 1),
    ]
    assert all("emb.weight (frozen) is not a key of engine.param_names" in f.message for f in save.findings)
    assert save.findings[0].evidence[0].path == "emb.weight"
    diff = subprocess.run(
        [sys.executable, "-m", "ds_doctor.cli", "diff", str(out / "watch.json"), str(bad / "watch.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    # the planted save, a regression against healthy
    assert diff.returncode == 1 and "param_name_map" in diff.stdout


@requires_deepspeed
def test_a_save_and_load_on_the_main_process_alone_never_hang_the_job(tmp_path: Path) -> None:
    """Plain DDP lets the main process save and load alone: the moments' gather waited for ranks that never came
    (30 min, the job died without its checkpoint). Each moment now waits a bounded time, checks the main rank alone
    and says so; `out` an existing folder gets the report inside it."""
    started = time.monotonic()
    ranks, out = run_job(tmp_path, "accelerate", "main-only", extra_env={"DS_DOCTOR_WATCH_WAIT_S": "2"})
    assert all(r["error"] is None for r in ranks) and ranks[0]["saved"], ranks
    assert time.monotonic() - started < GENEROUS_RUN_S  # the moments' gather never bounded: 30 min
    report = report_of(out / "ds-doctor-watch.json")
    watched = cases(report)
    save, load = watched["watch[before_save step 4]"], watched["watch[after_load]"]
    for case in (save, load):
        absent = [f for f in case.findings if f.invariant == "watch_ranks_present"]
        assert case.outcome == Outcome.PASS and case.world_size == 1, (case.case, case.reason)
        assert absent and "1 of 2 ranks reached this moment" in absent[0].message
    # the moments every rank reached were gathered
    assert not [
        f
        for r in report.results
        if r.case not in (save.case, load.case)
        for f in r.findings
        if f.invariant == "watch_ranks_present"
    ]


@requires_accelerate
def test_an_accelerate_loop_watched_healthy_and_a_resume_onto_meta_caught(tmp_path: Path) -> None:
    # healthy, one replica drifted, a resume onto meta: in one launch
    (ranks, out), (_, drifted), (_, resumed) = run_jobs(
        tmp_path,
        ("accelerate", "none", "none"),
        ("accelerate", "drift", "none"),
        ("accelerate", "s4", "none"),
    )
    assert all(r["distributed_type"] == "DistributedType.MULTI_CPU" for r in ranks)
    assert all(r["error"] is None and r["saved"] and all(r["restored"].values()) for r in ranks), ranks
    report = report_of(out / "watch.json")
    assert_healthy(report)
    assert list(cases(report)) == [
        "watch[after_prepare]",
        "watch[step 1]",
        "watch[step 2]",
        "watch[step 4]",
        "watch[before_save step 4]",
        "watch[after_load]",
    ]
    renders(out / "watch.json")

    # Accelerate driving DeepSpeed ZeRO-2
    planted, bad = run_job(tmp_path, "accelerate", "deepspeed-s1", "error")
    assert all(r["distributed_type"] == "DistributedType.DEEPSPEED" and not r["saved"] for r in planted), (
        planted
    )
    assert all(r["error"].startswith("DoctorError: ds-doctor at before_save step 4") for r in planted)
    assert all(all(r["restored"].values()) for r in planted)  # the engine's methods and load_state put back
    watched = report_of(bad / "watch.json")
    # save_checkpoint's moment
    assert [r.outcome for r in watched.results] == [Outcome.PASS] * 4 + [Outcome.FAIL]
    assert watched.results[-1].notes["target"] == "accelerate+deepspeed"

    # one element of rank 1's replica changed before step 2: the replica digest names the parameter (two ranks: no
    # majority to say which of them is right; tests/watch/test_watch.py names the odd one of three)
    steps = cases(report_of(drifted / "watch.json"))
    assert steps["watch[step 1]"].outcome == Outcome.PASS
    for label in ("step 2", "step 4"):  # and it stays apart: DDP never re-syncs weights
        assert steps[f"watch[{label}]"].outcome == Outcome.FAIL
        (finding,) = [f for f in steps[f"watch[{label}]"].findings if f.invariant == "replicas_agree"]
        assert finding.message == (
            f"{label}: the data-parallel replicas of ranks 0, 1 disagree, no majority to say which is right, in 1 "
            "parameter(s): body.weight (bitwise digest after the step)"
        )

    load = cases(report_of(resumed / "resumed.json"))["watch[after_load]"]
    colocation = [f for f in load.findings if f.invariant == "optimizer_state_colocation"]
    assert load.outcome == Outcome.FAIL and load.known_issue.id == "prodigy_group_tensors_left_on_cpu"
    assert sorted(f.rank for f in colocation) == [0, 1]
    for finding in colocation:
        assert "optimizer.param_groups[0].running_scale on cpu (owner on meta)" in finding.message
        assert {(r.role, r.path, r.device) for r in finding.evidence} >= {
            ("optim_group_tensor", "optimizer.param_groups[0].running_scale", "cpu"),
            ("param", "body.weight", "meta"),
        }


@requires_accelerate
def test_an_hf_trainer_run_with_the_callback_healthy_and_stopped_before_a_broken_save(tmp_path: Path) -> None:
    # healthy, then planted, in one launch
    (ranks, out), (planted, bad) = run_jobs(tmp_path, ("trainer", "none", "none"), ("trainer", "s1", "error"))
    assert all(r["error"] is None and r["checkpoints"] == ["checkpoint-2", "checkpoint-4"] for r in ranks), (
        ranks
    )
    assert all(r["restored"]["closed"] for r in ranks)
    report = report_of(out / "watch.json")
    assert_healthy(report)
    assert list(cases(report)) == [
        "watch[after_prepare]",
        "watch[step 1]",
        "watch[step 2]",
        "watch[before_save step 2]",
        "watch[step 4]",
        "watch[before_save step 4]",
    ]
    renders(out / "watch.json")

    assert all(r["error"].startswith("DoctorError: ds-doctor at before_save step 2") for r in planted), (
        planted
    )
    assert all(r["checkpoints"] == [] for r in planted)  # the Trainer never wrote checkpoint-2
    save = cases(report_of(bad / "watch.json"))["watch[before_save step 2]"]
    by_kind = {(f.invariant, f.severity.value) for f in save.findings}
    # without DeepSpeed the state_dict saves by name: the replaced trainable weight breaks the optimizer (error),
    # the replaced frozen one only leaves stale holders (warning)
    assert by_kind == {("optimizer_params_live", "error"), ("param_name_map", "warning")}
    # the torch-wide entry (optimizers keep the objects they were given), not a DeepSpeed-only one
    assert save.known_issue.id == "ds_replaced_trainable_param_not_trained"
    from ds_doctor.knowledge.catalog import get

    assert get(save.known_issue.id).package == "torch"

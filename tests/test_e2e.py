"""End to end through the real CLI and real torchrun launches (slow: marked multirank)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ds_doctor.reports.model import validate
from tests.bounds import GENEROUS_RUN_S, GENEROUS_S
from tests.conftest import requires_accelerate, requires_deepspeed

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.multirank


def ds_doctor(
    *args: str, extra_env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(extra_env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ds_doctor.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


def read_report(out: Path) -> dict:
    reports = sorted(out.glob("ds-doctor-*.json"))
    assert len(reports) == 1, reports
    data = json.loads(reports[0].read_text())
    validate(data)
    assert reports[0].with_suffix(".md").exists()
    return data


@dataclasses.dataclass(frozen=True)
class Run:
    proc: subprocess.CompletedProcess[str]
    out: Path
    data: dict

    def family(self, probe: str) -> dict[str, dict]:
        """The results of one family, by variant and world size (`z2-healthy-ws1`)."""
        return {
            r["case"].removeprefix(f"{probe}[").removesuffix("]"): r
            for r in self.data["results"]
            if r["probe"] == probe
        }


@pytest.fixture(scope="module")
def level3(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One real `ds-doctor run --level 3`: every family, every case, as a nightly job or a user runs it; but the
    equivalence family, whose level 3 trains every route several steps (tests/probes/test_equivalence.py runs it)."""
    out = tmp_path_factory.mktemp("level3")
    proc = ds_doctor(
        "run", "--level", "3", "-k", "not equivalence", "--out", str(out), "--json", timeout=1500
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]  # xfail/xpass never fail a run
    data = read_report(out)
    assert json.loads(proc.stdout) == data  # --json prints the same report
    return Run(proc, out, data)


@requires_deepspeed
def test_zero_offload_level3_every_cpu_case_passes(level3: Run) -> None:
    results = {f"zero_offload[{k}]": r for k, r in level3.family("zero_offload").items()}
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
    # before_init: the module, for ties_kept
    assert {r["stage"] for r in s2["device_map"]} == {
        "before_init",
        "after_init",
        "after_backward",
        "at_clip",
        "after_step",
    }
    # no advice on ds-doctor's own config, which leaves grad_accum_dtype unset as most users do (issue 45)
    assert s2["findings"] == []


def leftover_processes(marker: str) -> list[str]:
    """Processes (any depth, any session) whose command line mentions `marker` (a run's --out path)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if marker in " ".join(proc.info["cmdline"] or []):
                found.append(f"{proc.info['pid']}: {' '.join(proc.info['cmdline'])[:200]}")
    return found


def test_hang_and_crash_are_attributed_and_the_rest_still_runs(tmp_path: Path) -> None:
    proc = ds_doctor(
        "run",
        "--level",
        "3",
        "-k",
        "faults",
        "--out",
        str(tmp_path),
        extra_env={"DS_DOCTOR_EXTRA_PROBES": "tests.resources.fault_probes"},
        timeout=GENEROUS_RUN_S,  # a hang never cut short: for ever
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert leftover_processes(str(tmp_path)) == []  # the whole tree, ranks in their own sessions included
    results = {r["case"]: r for r in read_report(tmp_path)["results"]}
    assert results["faults[ok-ws2]"]["outcome"] == "pass"
    assert results["faults[ok-after-ws2]"]["outcome"] == "pass"

    hang = results["faults[hang-ws2]"]
    assert hang["outcome"] == "timeout"
    stuck = {r["rank"]: r for r in hang["ranks"]}
    assert stuck[1]["outcome"] == "timeout" and stuck[1]["stage"] == "stuck on purpose"
    assert "timed out after 6 s on rank 1" in hang["reason"]
    # the hung case cost at most its timeout + 5 s + the evidence: from its start (heartbeat) to the relaunch
    # of the rest
    launches = sorted((tmp_path / p for p in os.listdir(tmp_path) if p.startswith("run-")), key=str)[0]
    attempts = sorted(
        (d for d in launches.iterdir() if d.is_dir()), key=lambda d: int(d.name.rsplit("-", 1)[1])
    )
    hung_at = next(
        i
        for i, d in enumerate(attempts)
        if json.loads((d / "heartbeat-rank1.json").read_text())["case"] == "faults[hang-ws2]"
    )
    case_started = json.loads((attempts[hung_at] / "heartbeat-rank1.json").read_text())["case_started"]
    relaunched = (attempts[hung_at + 1] / "command.txt").stat().st_mtime
    # the evidence taken before the kill is bounded at 10 s, and the hang cut short 5 s after its timeout, on an idle
    # machine (a loaded one took 20.8 s more): a bound never applied waits for ever (the probe sleeps an hour)
    took = hang["notes"]["forensics"]["took_s"]
    assert took <= GENEROUS_S
    overran = relaunched - case_started - 6
    assert overran <= GENEROUS_S, f"overran its timeout by {overran:.1f} s, {took:.1f} s of it the evidence"

    killed = results["faults[sigkill-ws2]"]
    assert killed["outcome"] == "error"
    rank1 = {r["rank"]: r for r in killed["ranks"]}[1]
    assert (
        rank1["signal"] == "SIGKILL" and rank1["exit_code"] == -9 and rank1["stage"] == "about to be killed"
    )
    assert killed["known_issue"]["id"] == "torchrun_child_sigkill"

    raised = results["faults[raise-ws2]"]
    assert raised["outcome"] == "error" and "ValueError: planted failure on rank 1" in raised["reason"]
    assert "Traceback" in {r["rank"]: r for r in raised["ranks"]}[1]["traceback"]

    for case, signal_name, code, stage, said in [
        ("segfault", "SIGSEGV", -11, "dereferencing NULL", "rank 1 about to segfault"),
        ("abort", "SIGABRT", -6, "aborting", "rank 1 about to abort"),
        ("exit3", None, 3, "exiting", "rank 1 calls sys.exit(3)"),
    ]:
        result = results[f"faults[{case}-ws2]"]
        rank1 = {r["rank"]: r for r in result["ranks"]}[1]
        assert result["outcome"] == "error", case
        assert (rank1["signal"], rank1["exit_code"], rank1["stage"]) == (signal_name, code, stage), case
        assert said in rank1["stderr_tail"], case  # the tail of that rank's own stderr
    segv = {r["rank"]: r for r in results["faults[segfault-ws2]"]["ranks"]}[1]["stderr_tail"]
    assert "Fatal Python error: Segmentation fault" in segv  # faulthandler left the stack in the rank's log
    oom = results["faults[oom-ws2]"]
    assert oom["outcome"] == "error" and "DefaultCPUAllocator: can't allocate memory" in oom["reason"]
    assert "rank 1 asks for 4 EiB" in {r["rank"]: r for r in oom["ranks"]}[1]["stderr_tail"]


@requires_deepspeed
@requires_accelerate
def test_frozen_param_names_catches_replaced_parameters_before_the_save(level3: Run) -> None:
    data = level3.data
    results = level3.family("frozen_param_names")
    assert len(results) == 40

    def outcome(name: str) -> tuple[str, str, str]:
        result = results[name]
        return result["outcome"], result["known_issue"]["id"], result["known_issue"]["verdict"]

    for ws in (1, 2):
        for stage in (0, 2):
            assert results[f"z{stage}-healthy-ws{ws}"]["outcome"] == "pass"
            assert results[f"z{stage}-healthy-ws{ws}"]["notes"]["reloaded"] == [
                "emb.weight",
                "head.bias",
                "head.weight",
            ]
        # stage 0 saves the disk-dispatched embedding as a meta tensor: silent data loss, flagged before the save
        assert outcome(f"z0-dispatch-disk-ws{ws}") == ("xfail", "ds_ckpt_meta_params_saved", "reproduced")
        meta = [
            f for f in results[f"z0-dispatch-disk-ws{ws}"]["findings"] if f["invariant"] == "no_meta_params"
        ]
        assert {
            (f["rank"], f["stage"], f["evidence"][0]["path"], f["evidence"][0]["device"]) for f in meta
        } == {(rank, "before_save", "emb.weight", "meta") for rank in range(ws)}
        assert any("meta tensors" in s for s in results[f"z0-dispatch-disk-ws{ws}"]["notes"]["showed"])
        # stage 2 raises at save; the stale name map was reported before it
        for route in ("dispatch-disk", "set-tensor"):
            assert outcome(f"z2-{route}-ws{ws}") == (
                "xfail",
                "ds_frozen_param_not_in_param_names",
                "reproduced",
            )
            stale = [
                f for f in results[f"z2-{route}-ws{ws}"]["findings"] if f["invariant"] == "param_name_map"
            ]
            assert stale and all(
                f["stage"] == "before_save" and f["severity"] == "error" and f["remedy"] for f in stale
            )
        # a replaced trainable parameter stops training
        for name in (
            f"z0-set-tensor-trainable-ws{ws}",
            f"z2-set-tensor-trainable-ws{ws}",
            f"z0-assign-ws{ws}",
        ):
            assert outcome(name) == ("xfail", "ds_replaced_trainable_param_not_trained", "reproduced")
            assert {f["invariant"] for f in results[name]["findings"]} == {
                "param_name_map",
                "optimizer_params_live",
            }
        # stage 0 never reads the map for frozen weights: a stale map, nothing lost -> xpass with a warning
        assert outcome(f"z0-set-tensor-ws{ws}") == (
            "xpass",
            "ds_frozen_param_not_in_param_names",
            "not_affected",
        )
        assert {f["severity"] for f in results[f"z0-set-tensor-ws{ws}"]["findings"]} == {"warning"}
        # ZeRO-3 fails another way, and refuses full-size values up front
        assert outcome(f"z3-dispatch-disk-ws{ws}") == (
            "xfail",
            "ds_z3_param_replaced_after_init",
            "reproduced",
        )
        assert outcome(f"z3-assign-ws{ws}")[0] == "xpass"
        assert "size mismatch" in results[f"z3-assign-ws{ws}"]["notes"]["route_refused"]
    # misuses that break on every release: reproduced as designed, facts about DeepSpeed, never this stack's
    affecting = {issue["id"] for issue in data["affecting_issues"]}
    traps = {
        "ds_frozen_param_not_in_param_names",
        "ds_ckpt_meta_params_saved",
        "ds_replaced_trainable_param_not_trained",
        "ds_z3_param_replaced_after_init",
    }
    assert not affecting & traps
    markdown = next(level3.out.glob("ds-doctor-*.md")).read_text()
    assert "## Library traps reproduced on purpose" in markdown
    assert (
        all(f"| `{trap}` |" in markdown for trap in traps)
        and "### `ds_frozen_param_not_in_param_names`" not in markdown
    )


@requires_deepspeed
@requires_accelerate
def test_accelerate_deepspeed_lifecycle_orderings(level3: Run) -> None:
    results = level3.family("accelerate_deepspeed_lifecycle")
    assert len(results) == 24
    expected = {
        "scheduler-before-prepare": "acc_ds_placeholder_used_before_prepare",
        "real-optimizer": "acc_ds_optimizer_defined_twice",
        "real-scheduler": "acc_ds_scheduler_defined_twice",
        "dummy-scheduler-no-config": "acc_ds_scheduler_missing",
        "dummy-optim-no-config": "acc_ds_optimizer_defined_twice",
        "no-dataloader": "acc_ds_auto_batch_needs_dataloader",
        "scheduler-second-prepare": "acc_ds_placeholder_used_before_prepare",
        "scheduler-second-prepare-auto": "acc_ds_auto_value_unfilled",
        "lr-mismatch": "acc_ds_dummy_lr_overrides_config",
    }
    for ws in (1, 2):
        for stage in (2, 3):
            healthy = results[f"z{stage}-healthy-ws{ws}"]
            assert healthy["outcome"] == "pass" and healthy["findings"] == []
            prepared = healthy["notes"]["prepared"]
            assert prepared["optimizer_wraps_engine"] and prepared["scheduler_wraps_engine"]
            assert prepared["num_processes"] == prepared["dist_world_size"] == prepared["dp_world_size"] == ws
            assert max(prepared["lr_trace"]) == prepared["warmup_max_lr"] == prepared["dummy_lr"]
        for ordering, issue in expected.items():
            result = results[f"{ordering}-ws{ws}"]
            assert (result["outcome"], result["known_issue"]["id"], result["known_issue"]["verdict"]) == (
                "xfail",
                issue,
                "reproduced",  # a misuse on every release: the library's trap, not this stack
            ), (ordering, result["reason"])
            assert (
                result["notes"]["ordering"] in result["findings"][0]["message"] or ordering == "lr-mismatch"
            )
            assert result["findings"][0]["remedy"]
    # without InitProcessGroupKwargs(backend="gloo") Accelerate says 1 process on a 2-rank group
    one = results["no-backend-kwargs-ws1"]  # one process cannot disagree with itself: nothing to say there
    assert one["outcome"] == "skip" and "shows at 2 ranks or more" in one["reason"]
    mismatch = results["no-backend-kwargs-ws2"]
    assert (
        mismatch["outcome"] == "xfail" and mismatch["known_issue"]["id"] == "acc_cpu_process_count_mismatch"
    )
    assert [f["invariant"] for f in mismatch["findings"]] == ["world_size_agreement", "world_size_agreement"]
    assert "accelerator.num_processes = 1, dist world size = 2" in mismatch["findings"][0]["message"]


def test_optimizer_coverage_every_wrapper_route(level3: Run) -> None:
    data = level3.data
    results = level3.family("optimizer_coverage")
    assert len(results) == 30
    intended = ["a.bias", "a.weight", "head.bias", "head.weight"]
    has_ds = {"deepspeed", "accelerate", "transformers"} <= {
        k for k, v in data["env"]["packages"].items() if v
    }
    for ws in (1, 2):
        recommended = ["fsdp1-orig", "fsdp1-orig-opt-before-wrap", "fsdp1-flat", "fsdp2"]
        if has_ds:
            recommended += [
                "deepspeed-z0",
                "deepspeed-z1",
                "deepspeed-z2",
                "deepspeed-z3",
                "accelerate-deepspeed",
            ]
        for route in recommended:
            result = results[f"{route}-ws{ws}"]
            assert result["outcome"] == "pass", (route, result["reason"])
            assert (
                result["notes"]["tracked_after"] == intended
                and result["notes"]["changed_by_step"] == intended
            )
        for route in ("fsdp1-flat-opt-before-wrap", "fsdp2-opt-before-wrap"):  # orphans, and nothing trains
            result = results[f"{route}-ws{ws}"]
            assert (result["outcome"], result["known_issue"]["id"], result["known_issue"]["verdict"]) == (
                "xfail",
                "fsdp_optimizer_built_before_wrap",
                "reproduced",
            )
            assert result["notes"]["changed_by_step"] == [] and len(result["notes"]["showed"]) == 4
            invariants = {f["invariant"] for f in result["findings"]}
            assert invariants == {"tracked_set", "tracked_live"}  # both caught before the step
        # ZeRO drops a frozen parameter from the optimizer on purpose: an info, and the case passes
        if has_ds:
            dropped = results[f"deepspeed-z2-frozen-in-group-ws{ws}"]
            assert dropped["outcome"] == "pass" and "c.weight" in dropped["notes"]["tracked_before"]
            assert {(f["severity"], f["message"].split(" ")[0]) for f in dropped["findings"]} == {
                ("info", "c.bias"),
                ("info", "c.weight"),
            }
        assert results[f"accelerate-fsdp-ws{ws}"]["outcome"] == "skip"
        assert "ignored the FSDP plugin" in results[f"accelerate-fsdp-ws{ws}"]["reason"]
        for route in ("composer", "composer-two-groups"):  # Composer pins torch < 2.7.1; its FSDP wants CUDA
            assert (
                results[f"{route}-ws{ws}"]["outcome"] == "skip"
                and "3493" in results[f"{route}-ws{ws}"]["reason"]
            )


def test_optimizer_state_placement_round_trip_on_cpu(level3: Run) -> None:
    data = level3.data
    results = level3.family("optimizer_state_placement")
    installed = {k for k, v in data["env"]["packages"].items() if v}
    for ws in (1, 2):
        for name, dist in (
            ("adamw", "torch"),
            ("prodigy", "prodigyopt"),
            ("prodigy-plus-schedule-free", "prodigy-plus-schedule-free"),
        ):
            result = results[f"{name}-ws{ws}"]
            if dist not in installed:
                assert result["outcome"] == "skip" and f"pip install {dist}" in result["reason"]
                continue
            assert result["outcome"] == "pass" and result["findings"] == [], (name, result["reason"])
            stages = {(r["stage"], r["role"]) for r in result["device_map"]}
            assert {
                ("after_prepare", "optim_state"),
                ("after_load", "optim_state"),
                ("after_step", "optim_state"),
            } <= stages
            assert {r["rank"] for r in result["device_map"]} == set(range(ws))
        if "prodigy-plus-schedule-free" in installed:
            ppsf = results[f"prodigy-plus-schedule-free-ws{ws}"]
            groups = {
                r["path"]
                for r in ppsf["device_map"]
                if r["role"] == "optim_group_tensor" and r["stage"] == "after_load"
            }
            assert groups == {
                "optimizer.param_groups[0].running_d_numerator",
                "optimizer.param_groups[0].running_d_denom",
            }
            assert ppsf["known_issue"]["id"] == "prodigy_group_tensors_left_on_cpu"


def test_a_level_3_ticket_fits_and_the_log_has_a_line_per_case(level3: Run) -> None:
    """GitHub refuses an issue body over 65,536 characters: a full level-3 run's ticket Markdown stays under 60,000,
    lists every case, groups the cases that reproduce one known issue, and points at the JSON for the device maps.
    A log (stdout or stderr not a terminal) gets one plain line per finished case, ids never cut."""
    (markdown,) = level3.out.glob("ds-doctor-*.md")
    text = markdown.read_text()
    results = level3.data["results"]
    assert len(text) < 60_000, len(text)
    assert all(f"`{r['case']}`" in text for r in results)
    reproduced = {
        (r["known_issue"]["id"], r["known_issue"]["verdict"])
        for r in results
        if r["outcome"] in ("xfail", "xpass")
    }
    assert len(reproduced) >= 10
    # what concerns this stack needs a look (once, whatever its other cases said); the library's traps, a table row
    for issue_id in {issue_id for issue_id, _ in reproduced}:
        if (issue_id, "affected") in reproduced:
            assert text.count(f"### `{issue_id}` — affected:") == 1, issue_id
        else:
            assert text.count(f"| `{issue_id}` |") == 1 and f"### `{issue_id}`" not in text, issue_id
    affected = {
        i["id"] for i in level3.data["affecting_issues"]
    }  # only ranges that hold the installed releases: accelerate 1.15.0 is inside >=1.13.0 (found by bisect)
    assert affected <= {"hf_trainer_num_items_unshifted_overcount", "acc_cpu_process_count_mismatch"}, (
        affected
    )
    records = sum(len(r["device_map"]) for r in results)
    assert records > 1000 and f"{records} device-map records" in text
    assert f"`{markdown.with_suffix('.json').name}`" in text
    log = level3.proc.stderr.splitlines()  # with --json the console goes to stderr
    for result in results:
        if result["outcome"] != "skip":
            assert any(line.startswith(f"{result['case']} {result['outcome'].upper()} ") for line in log), (
                result["case"]
            )


@pytest.fixture(scope="module")
def without_numpy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real node with torch but no numpy: a venv whose site-packages links every package of ours but numpy."""
    import sysconfig

    venv = tmp_path_factory.mktemp("no-numpy") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    target = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not re.match(r"numpy($|-|\.libs)", entry.name):
            (target / entry.name).symlink_to(entry)
    python = venv / "bin" / "python"
    assert (
        subprocess.run([str(python), "-c", "import numpy"], capture_output=True, timeout=60).returncode == 1
    )
    return python


def test_a_node_without_numpy_is_named_and_whatever_crosses_ranks_still_works(
    without_numpy: Path, tmp_path: Path
) -> None:
    """torch does not require numpy, but its object collectives decode through it: the probes gather JSON through
    tensors instead, level 1 names the missing numpy, and a stack that does need it is classified, not unknown."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(without_numpy), "-m", "ds_doctor.cli", "run", "--out", str(tmp_path), "--json", *args],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            timeout=600,
        )

    level1 = run("--level", "1")
    assert level1.returncode == 0, level1.stderr[-2000:]
    (node,) = json.loads(level1.stdout)["results"]
    assert node["case"] == "environment[node]" and node["outcome"] == "pass"
    assert [(f["invariant"], f["severity"]) for f in node["findings"]] == [("numpy_present", "warning")]
    proc = run("--level", "3", "-k", "compute or (optimizer_coverage and (fsdp2 or deepspeed-z2-ws2))")
    results = {r["case"]: r for r in json.loads(proc.stdout)["results"]}
    assert {c: r["outcome"] for c, r in results.items() if r["outcome"] == "pass"} == {
        **{f"compute[{v}-ws1]": "pass" for v in ("matmul-bf16", "matmul-fp16", "matmul-fp32", "memory")},
        "optimizer_coverage[fsdp2-ws1]": "pass",
        "optimizer_coverage[fsdp2-ws2]": "pass",
    }
    deepspeed = results["optimizer_coverage[deepspeed-z2-ws2]"]  # DeepSpeed itself imports numpy
    assert deepspeed["outcome"] == "error" and deepspeed["known_issue"]["id"] == "torch_numpy_missing"
    assert proc.returncode == 1


def test_a_killed_doctor_leaves_a_run_dir_that_report_renders(tmp_path: Path) -> None:
    """SIGKILL `ds-doctor run` while a case hangs: what finished is in the run directory, nothing is left running,
    and `ds-doctor report RUN_DIR` renders the partial report, marking the cases that never finished."""
    import signal

    env = {**os.environ, "PYTHONPATH": str(ROOT), "DS_DOCTOR_EXTRA_PROBES": "tests.resources.fault_probes"}
    out = tmp_path / "out"
    doctor_proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ds_doctor.cli",
            "run",
            "--level",
            "3",
            "-k",
            "faults and (ok or hang)",
            "--out",
            str(out),
            "--timeout",
            "60",
        ],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    beat = out.glob("run-*/ws2-cpu-0/heartbeat-rank1.json")
    while time.monotonic() < deadline:
        beats = list(out.glob("run-*/ws2-cpu-0/heartbeat-rank1.json"))
        if beats and "stuck on purpose" in beats[0].read_text():
            break
        time.sleep(0.2)
    else:
        doctor_proc.kill()
        raise AssertionError(f"the hang case never started: {list(beat)}")
    doctor_proc.send_signal(signal.SIGKILL)
    doctor_proc.wait(timeout=30)
    # torchrun gets SIGTERM from the kernel (PDEATHSIG) and takes its ranks along; left behind, they stay for ever
    deadline = time.monotonic() + GENEROUS_S
    while leftover_processes(str(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftover_processes(str(out)) == []
    assert list(out.glob("ds-doctor-*.json")) == []  # the killed run wrote no report

    run_dir = next(out.glob("run-*"))
    with (run_dir / "ws2-cpu-0" / "rank0.jsonl").open("a") as handle:  # a rank killed in the middle of a line
        handle.write('{"case": "faults[hang-ws2]", "rank": 0, "outc')
    proc = ds_doctor("report", str(run_dir), "--json")
    assert proc.returncode == 0, proc.stderr  # a case never run fails nothing
    # after ok and hang
    assert "rank0.jsonl: line 3 is truncated or not a result line; skipped" in proc.stderr
    data = json.loads(proc.stdout)
    validate(data)
    results = {r["case"]: r for r in data["results"]}
    assert list(results) == ["faults[ok-ws2]", "faults[hang-ws2]", "faults[ok-after-ws2]"]
    assert results["faults[ok-ws2]"]["outcome"] == "pass"
    for case in ("faults[hang-ws2]", "faults[ok-after-ws2]"):
        assert results[case]["outcome"] == "not_run" and results[case]["reason"].startswith("not run")
        assert results[case]["notes"] == {"unfinished": True}
    # killed unawares: no signal to name, and said so
    assert data["stopped"] == {"signal": None, "finished": 1, "planned": 3}
    written = sorted(p.name for p in out.glob("ds-doctor-*"))
    # JSON, Markdown and HTML, beside the run
    assert len(written) == 3 and all("-report." in name for name in written)
    markdown = next(out.glob("ds-doctor-*.md")).read_text()
    assert markdown.splitlines()[2].startswith(
        "**Did not finish (the run ended without writing its report) after 1 of 3 cases: 2 not run.**"
    )
    assert "| `faults[hang-ws2]` | not run |" in markdown and "need a look" not in markdown


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_run_stopped_by_a_signal_says_so_everywhere_and_its_logs_keep_no_secret(
    tmp_path: Path, signame: str
) -> None:
    """SIGTERM (`timeout`, a CI job's limit) or SIGHUP (the terminal closed) while the second of three cases runs:
    the shell's exit code, one closing line on stderr, and the report of what finished, which says first that the run
    was stopped, by what, after how many of its cases; the cases it never finished are `not run`, none an error. The
    token a case printed to its rank's log is masked there, as at the end of a run that finished (issue 45)."""
    import signal

    from tests.resources import secret_probes as leaky
    from tests.resources.stop_probes import WAITING

    token, secret = leaky.SECRETS["hf_1"]
    out = tmp_path / "out"
    doctor_proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "ds_doctor.cli", "run", "--level", "3", "-k", "stops", "--out", str(out)),
            *("--junit", str(tmp_path / "junit.xml"), "--prometheus", str(tmp_path / "ds.prom")),
        ],
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DS_DOCTOR_EXTRA_PROBES": "tests.resources.stop_probes",
            "HF_TOKEN": token,
        },
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and doctor_proc.poll() is None:
            beats = list(out.glob("run-*/ws1-cpu-0/heartbeat-rank0.json"))
            if beats and WAITING in beats[0].read_text(errors="ignore"):
                break  # the first case has finished, the second is under way
            time.sleep(0.2)
        else:
            raise AssertionError(f"the second case never started: {doctor_proc.poll()}")
        doctor_proc.send_signal(getattr(signal, signame))
        stdout, stderr = doctor_proc.communicate(timeout=120)
    finally:
        if doctor_proc.poll() is None:
            doctor_proc.kill()
    assert doctor_proc.returncode == 128 + getattr(signal, signame), stderr[-3000:]

    (report_file,) = out.glob("ds-doctor-*-interrupted.json")
    data = json.loads(report_file.read_text())
    validate(data)
    assert data["stopped"] == {"signal": signame, "finished": 1, "planned": 3}
    outcomes = {r["case"]: r["outcome"] for r in data["results"] if r["probe"] == "stops"}
    assert outcomes == {
        "stops[first-ws1]": "pass",
        "stops[second-ws1]": "not_run",
        "stops[third-ws1]": "not_run",
    }
    assert "error" not in {r["outcome"] for r in data["results"]} and data["summary"]["not_run"] == 2

    markdown = report_file.with_suffix(".md").read_text()
    headline = f"Stopped by {signame} after 1 of 3 cases: 2 not run"
    assert headline in "\n".join(markdown.splitlines()[:3]), markdown[:500]
    assert "need a look" not in markdown
    assert f'<div class="verdict stopped"><strong>{headline}.' in report_file.with_suffix(".html").read_text()

    # JUnit skips the cases not run, with a message; Prometheus labels them and says the run stopped
    junit = (tmp_path / "junit.xml").read_text()
    skipped = (
        f'<skipped message="not run: the run stopped before every rank of this case reported it ({headline})"'
    )
    assert skipped in junit
    assert 'failures="0" errors="0" skipped="2"' in junit
    metrics = (tmp_path / "ds.prom").read_text()
    assert 'outcome="not_run"' in metrics and 'ds_doctor_run_stopped{host="' in metrics

    # the console closes with one line on stderr (no "aborted" after it)
    assert "aborted" not in stdout
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"ds-doctor: stopped by {signame} after 1 of 3 cases: 2 not run; its report: "), (
        stderr
    )
    assert last.endswith("-interrupted.md (JSON and HTML beside it)") and "aborted" not in stderr

    run_dir = next(out.glob("run-*"))
    logs = {p: p.read_text(errors="ignore") for p in run_dir.rglob("*.log")}
    assert any("logging in to the hub with token" in text for text in logs.values()), logs
    assert [p for p, text in logs.items() if secret in text] == []  # scrubbed although the launch never ended
    assert json.loads((run_dir / "stopped.json").read_text()) == {"signal": signame}
    deadline = time.monotonic() + GENEROUS_S  # the kernel's PDEATHSIG takes the ranks along (else: for ever)
    while leftover_processes(str(out)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftover_processes(str(out)) == []


def test_thirty_planted_secrets_never_reach_any_output(tmp_path: Path) -> None:
    """Secrets planted in allowlisted variables, a path, command lines, an exception and a stderr tail: none comes
    out in the JSON, the Markdown, the console, or a re-rendered report; ordinary values survive untouched."""
    from tests.resources import secret_probes as leaky

    secrets = leaky.SECRETS
    env_vars = {f"NCCL_PLANTED_{i}": f"value {secrets[k][0]} end" for i, k in enumerate(leaky.IN_ENV)}
    env_vars["DS_ACCESS_TOKEN"] = "plainvalue-by-name-0042"  # masked for its name whatever its shape
    env_vars["TORCH_EXTENSIONS_DIR"] = leaky.ORDINARY[0]
    out = tmp_path / secrets["ghp"][0] / "reports"  # a directory name that looks like a token
    proc = ds_doctor(
        "run",
        "--level",
        "3",
        "-k",
        "leaky",
        "--out",
        str(out),
        extra_env={"DS_DOCTOR_EXTRA_PROBES": "tests.resources.secret_probes", **env_vars},
    )
    assert proc.returncode == 1, proc.stderr[-2000:]  # the probe raises on purpose
    run_dir = next(out.glob("run-*"))
    again = ds_doctor("report", str(run_dir), "--json", "--out", str(tmp_path / "again"))
    assert again.returncode == 1, again.stderr[-2000:]
    outputs = {
        "json": next(out.glob("ds-doctor-*.json")).read_text(),
        "markdown": next(out.glob("ds-doctor-*.md")).read_text(),
        "console": proc.stdout + proc.stderr,
        "report console": again.stdout + again.stderr,
        "report markdown": next((tmp_path / "again").glob("*.md")).read_text(),
    }
    for path in sorted(run_dir.rglob("*")):  # what `report RUN_DIR` rebuilds from and users tar up (issue 21)
        if path.is_file() and ".tmp" not in path.name:
            outputs[f"run directory {path.relative_to(run_dir)}"] = path.read_text(errors="ignore")
    assert any(name.endswith(".log") for name in outputs) and any(name.endswith(".jsonl") for name in outputs)
    planted = [value for _, value in secrets.values()] + ["plainvalue-by-name-0042"]
    assert len(planted) >= 30
    for name, text in outputs.items():
        leaked = [value for value in planted if value in text]
        assert leaked == [], f"{name} leaked {leaked}"
    report = json.loads(outputs["json"])
    result = report["results"][0]
    assert result["outcome"] == "error" and "could not reach the hub" in result["reason"]
    assert "stderr of a job" in result["ranks"][0]["stderr_tail"]  # the channels were really there, scrubbed
    for value in leaky.ORDINARY:
        assert value in outputs["json"], value
    assert report["env"]["variables"]["TORCH_EXTENSIONS_DIR"] == leaky.ORDINARY[0]
    assert report["env"]["variables"]["DS_ACCESS_TOKEN"] == "<redacted>"
    assert set(report["env"]["variables"]) >= set(env_vars)


def test_anonymize_replaces_host_user_ip(tmp_path: Path) -> None:
    # a login of its own: as root (CI) the login names no one and stays (issue 45)
    proc = ds_doctor(
        "run",
        "--level",
        "1",
        "--out",
        str(tmp_path),
        "--anonymize",
        "--json",
        extra_env={
            "NCCL_COMM_ID": "10.20.30.40:29500",
            "USER": "dsdr-alice",
            "LOGNAME": "dsdr-alice",
            "TORCH_HOME": "/home/dsdr-alice/t",
            "MASTER_ADDR": "127.0.0.1",
        },
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    variables = report["env"]["variables"]
    assert report["hardware"]["host"] == "host-1"
    assert variables["NCCL_COMM_ID"] == "ip-1:29500" and variables["MASTER_ADDR"] == "127.0.0.1"
    # the placeholder's number is the order names are met in: a HOME of any name (CI's fresh one) may come first
    assert re.fullmatch(r"/home/user-\d+/t", variables["TORCH_HOME"]), variables["TORCH_HOME"]
    assert "dsdr-alice" not in proc.stdout
    assert all("host-1" in p.name for p in tmp_path.glob("ds-doctor-*"))  # file names carry no host name


def listeners(marker: str) -> dict[str, list[tuple[str, int]]]:
    """Listening sockets of every process whose command line mentions `marker`, by command (torchrun / worker)."""
    import psutil

    found: dict[str, list[tuple[str, int]]] = {}
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmd = " ".join(proc.info["cmdline"] or [])
            if marker in cmd:
                # torchrun's command line names the worker module too (its arguments): ask for torchrun first
                kind = (
                    "torchrun"
                    if "torch.distributed.run" in cmd
                    else "worker"
                    if "ds_doctor.run.worker" in cmd
                    else "doctor"
                )
                found.setdefault(kind, []).extend(
                    (c.laddr.ip, c.laddr.port)
                    for c in proc.net_connections("inet")
                    if c.status == psutil.CONN_LISTEN
                )
    return found


def test_a_shared_node_port_29500_taken_and_two_runs_at_once(tmp_path: Path) -> None:
    import socket

    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with contextlib.suppress(OSError):  # if something else holds it already, it is taken all the same
        holder.bind(("0.0.0.0", 29500))
        holder.listen()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DS_DOCTOR_EXTRA_PROBES": "tests.resources.fault_probes"}
    out = tmp_path / "shared"
    command = [
        sys.executable,
        "-m",
        "ds_doctor.cli",
        "run",
        "--level",
        "3",
        "--out",
        str(out),
        "--json",
        "-k",
    ]
    hanging = subprocess.Popen(
        [*command, "faults and hang"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    quick = subprocess.Popen(
        [*command, "faults and ok and not after"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            beats = list(out.glob(f"run-*-{hanging.pid}/ws2-cpu-0/heartbeat-rank1.json"))
            if beats and "stuck on purpose" in beats[0].read_text():
                break
            time.sleep(0.2)
        seen = listeners(f"-{hanging.pid}/")
        master_port = int(
            re.search(
                r"--master-port=(\d+)",
                next(out.glob(f"run-*-{hanging.pid}/ws2-cpu-0/command.txt")).read_text(),
            ).group(1)
        )
        hang_out, hang_err = hanging.communicate(timeout=120)
        quick_out, quick_err = quick.communicate(timeout=120)
    finally:
        holder.close()
        for proc in (hanging, quick):
            if proc.poll() is None:
                proc.kill()
    # gloo's sockets listen on loopback only; the one exception is torch's TCPStore on the launch's master port (hosted
    # by torchrun or rank 0), which binds every interface whatever the master address (torch has no bind option;
    # measured on 2.13), on a free port of its own, never 29500
    everything = [addr for addrs in seen.values() for addr in addrs]
    assert any(ip == "127.0.0.1" for ip, _ in seen["worker"]), seen
    assert {port for ip, port in everything if ip not in ("127.0.0.1", "::1")} <= {master_port}, (
        seen,
        master_port,
    )
    assert master_port != 29500
    assert hanging.returncode == 1 and quick.returncode == 0, hang_err[-2000:] + quick_err[-2000:]
    hang_report, quick_report = json.loads(hang_out), json.loads(quick_out)
    assert [r["outcome"] for r in hang_report["results"]] == ["timeout"]
    assert [r["outcome"] for r in quick_report["results"]] == ["pass"]
    assert hang_report["run_dir"] != quick_report["run_dir"]  # a private run directory each
    assert len(list(out.glob("ds-doctor-*.json"))) == 2 and len(list(out.glob("ds-doctor-*.md"))) == 2


def test_nightly_smoke_comm_compute_junit_prometheus_and_a_baseline_diff(tmp_path: Path) -> None:
    """The hardware families at world size 2 over gloo, every collective checked on every rank; then a
    second run with a planted bad link against a baseline with a planted bandwidth drop."""
    xmlschema = pytest.importorskip("xmlschema")
    prom_parser = pytest.importorskip("prometheus_client.parser")
    from importlib import resources

    from ds_doctor.checks import collectives

    extra = {"DS_DOCTOR_EXTRA_PROBES": "tests.resources.faulty_link_probes,tests.resources.faulty_gpu_probes"}
    first, second = tmp_path / "first", tmp_path / "second"
    proc = ds_doctor(
        "run",
        "-k",
        "comm or compute or faulty_link or faulty_gpu",
        "--out",
        str(first),
        "--junit",
        str(tmp_path / "first.xml"),
        "--prometheus",
        str(tmp_path / "first.prom"),
        "--table",
        str(tmp_path / "table"),
        extra_env=extra,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    data = read_report(first)
    results = {r["case"]: r for r in data["results"]}
    assert set(results) == {
        *(f"comm[{c}-ws{n}]" for c in collectives.COLLECTIVES for n in (1, 2)),
        *(f"comm[{c}-bf16-ws{n}]" for c in collectives.COLLECTIVES for n in (1, 2)),
        *(f"compute[{v}-ws1]" for v in ("matmul-bf16", "matmul-fp16", "matmul-fp32", "memory")),
        "faulty_link[all_reduce-ws2]",
        "faulty_link[all_gather-ws2]",
        "faulty_link[all_reduce-bf16-ws2]",
        "faulty_gpu[matmul-bf16-ws2]",
    }
    assert {r["outcome"] for r in results.values()} == {"pass"}
    for collective in collectives.COLLECTIVES:
        result = results[f"comm[{collective}-ws2]"]
        notes, rows = result["notes"], result["series"]
        assert notes["backend"] == "gloo" and notes["bus_factor"] == collectives.bus_factor(collective, 2)
        assert [row["bytes"] for row in rows] == [4096, 65536, 1048576, 4194304]
        for row in rows:  # algbw = bytes / time, busbw = algbw * factor, as nccl-tests
            assert row["algbw_gbps"] == pytest.approx(
                row["bytes"] / 1e9 / (row["time_us"] / 1e6), rel=0.02, abs=1e-4
            )
            assert row["busbw_gbps"] == pytest.approx(
                row["algbw_gbps"] * notes["bus_factor"], rel=0.01, abs=1e-4
            )
        assert result["measures"]["busbw_gbps"] == rows[-1]["busbw_gbps"] > 0
    for dtype in ("bf16", "fp16", "fp32"):
        measures = results[f"compute[matmul-{dtype}-ws1]"]["measures"]
        assert 0 <= measures["relative_error"] <= measures["error_tolerance"] and measures["tflops"] > 0
    assert results["compute[memory-ws1]"]["notes"] == {"allocated_bytes": 64 << 20, "wrong_elements": 0}
    markdown = next(first.glob("ds-doctor-*.md")).read_text()
    assert "## Measurements" in markdown and "| `comm[all_reduce-ws2]` | 4194304 |" in markdown
    assert "| `compute[matmul-bf16-ws1]` | 256 |" in markdown
    # a one-rank collective moves nothing between ranks: its busbw is shown as a dash with the reason, not as 0
    assert "| `comm[all_reduce-ws1]` | — (one rank: no data moves between ranks) |" in markdown
    xmlschema.XMLSchema(str(resources.files("reports").joinpath("junit.xsd"))).validate(
        str(tmp_path / "first.xml")
    )
    metrics = {
        f.name: f.samples
        for f in prom_parser.text_string_to_metric_families((tmp_path / "first.prom").read_text())
    }
    busbw = {s.labels["case"] for s in metrics["ds_doctor_busbw_gbps"]}
    assert busbw >= {"comm[all_reduce-ws2]", "comm[broadcast-ws2]"} and "comm[broadcast-ws1]" not in busbw
    matmuls = {f"compute[matmul-{d}-ws1]" for d in ("bf16", "fp16", "fp32")} | {"faulty_gpu[matmul-bf16-ws2]"}
    assert {s.labels["case"] for s in metrics["ds_doctor_tflops"]} == matmuls

    # the baseline claims all_reduce once ran 1000x faster: a planted bandwidth regression
    (report_file,) = first.glob("ds-doctor-*.json")
    planted = json.loads(report_file.read_text())
    for result in planted["results"]:
        if result["case"] == "comm[all_reduce-ws2]":
            result["measures"]["busbw_gbps"] *= 1000
            result["measures"]["algbw_gbps"] *= 1000
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(planted))
    proc = ds_doctor(
        "run",
        "-k",
        "comm or compute or faulty_link or faulty_gpu",
        "--out",
        str(second),
        "--baseline",
        str(baseline),
        "--tolerance",
        "90",
        "--table",
        str(tmp_path / "table"),
        extra_env={**extra, "DS_DOCTOR_TEST_BAD_LINK": "1", "DS_DOCTOR_TEST_BAD_GPU": "1"},
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr[-3000:] + proc.stdout[-3000:]
    data = read_report(second)
    bad = {r["case"]: r for r in data["results"] if r["outcome"] != "pass"}
    # one GPU of two corrupting one bit of one element: rank 1 named by the known answer, its replay and the ranks
    gpu = bad.pop("faulty_gpu[matmul-bf16-ws2]")
    assert gpu["outcome"] == "fail"
    assert {(f["invariant"], f["rank"]) for f in gpu["findings"]} == {
        ("matmul_known_answer", 1),
        ("matmul_replay", 1),
        ("matmul_ranks_differ", 0),  # two ranks that disagree: said once, naming no majority
    }
    assert set(bad) == {
        "faulty_link[all_reduce-ws2]",
        "faulty_link[all_gather-ws2]",
        "faulty_link[all_reduce-bf16-ws2]",
    }
    for result in bad.values():
        assert result["outcome"] == "fail"
        findings = result["findings"]
        # only rank 1's copy
        assert {(f["invariant"], f["rank"]) for f in findings} == {("collective_result", 1)}
        assert (
            "1 of " in findings[0]["message"] and "elements wrong (first at index 3" in findings[0]["message"]
        )
    assert "REGRESSED" in proc.stdout and "faulty_link[all_reduce-ws2]" in proc.stdout
    (diff_md,) = second.glob("ds-doctor-*.diff.md")
    assert "| REGRESSION | comm[all_reduce-ws2] busbw_gbps |" in diff_md.read_text()

    (new_file,) = second.glob("ds-doctor-*.json")
    proc = ds_doctor("diff", str(baseline), str(new_file), "--tolerance", "90", "--json")
    assert proc.returncode == 1, proc.stderr
    regressions = {(c["kind"], c["subject"]) for c in json.loads(proc.stdout)["changes"] if c["regression"]}
    assert {
        ("outcome", "faulty_link[all_reduce-ws2]"),
        ("outcome", "faulty_link[all_gather-ws2]"),
        ("finding", "faulty_link[all_reduce-ws2]"),
        ("finding", "faulty_link[all_gather-ws2]"),
        ("measure", "comm[all_reduce-ws2] busbw_gbps"),
        ("measure", "comm[all_reduce-ws2] algbw_gbps"),
    } <= regressions
    # no hardware or version change
    assert {kind for kind, _ in regressions} <= {"outcome", "finding", "measure"}
    proc = ds_doctor("diff", str(report_file), str(report_file))
    assert proc.returncode == 0 and "Nothing changed." in proc.stdout
    check_the_results_table(tmp_path / "table", json.loads(report_file.read_text()), data)


def check_the_results_table(table: Path, first: dict, second: dict) -> None:
    """Both runs' rows in the table `--table` wrote (one node, one night: two files), as DuckDB reads them; `fleet`
    over it sees the newest run, its failing cases and its measures."""
    duckdb = pytest.importorskip("duckdb")
    files = sorted(table.rglob("*.parquet"))
    nights = {f"night={report['started_at'][:10]}" for report in (first, second)}  # UTC dates
    assert len(files) == 2 and {f.parent.parent.name for f in files} == nights
    rows = duckdb.sql(
        f"SELECT run, value FROM read_parquet('{table}/night=*/node=*/*.parquet', hive_partitioning = true) "
        "WHERE kind = 'measure' AND \"case\" = 'comm[all_reduce-ws2]' AND measure = 'busbw_gbps' ORDER BY run"
    ).fetchall()
    assert [value for _, value in rows] == [
        first_value(first, "comm[all_reduce-ws2]"),
        first_value(second, "comm[all_reduce-ws2]"),
    ]
    proc = ds_doctor("fleet", str(table), "--json")
    assert proc.returncode == 1, proc.stderr  # the second run's failing cases
    (node,) = json.loads(proc.stdout)["nodes"]
    assert {c["case"] for c in node["failing"]} == {
        r["case"] for r in second["results"] if r["outcome"] == "fail"
    }
    assert node["started_at"] == second["started_at"]


def first_value(report: dict, case: str) -> float:
    return next(r["measures"]["busbw_gbps"] for r in report["results"] if r["case"] == case)


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium (make test installs Debian's where it is root with apt)"
)
def test_a_level_3_html_report_opens_offline_in_headless_chromium(level3: Run, tmp_path: Path) -> None:
    """The page a run writes beside its JSON, opened as a reader would: in a real browser (Debian's chromium,
    headless), with every host name unresolvable, so anything fetched would fail. It renders every case, logs no
    console message or refused load, and its screenshot is a real picture."""
    (page,) = level3.out.glob("ds-doctor-*.html")
    browser = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",  # root in CI
        "--disable-gpu",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--enable-logging=stderr",
        "--v=0",
    ]
    dom = subprocess.run(
        [*browser, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=True
    )
    results = level3.data["results"]
    assert all(f"<code>{r['case']}</code>" in dom.stdout for r in results)
    assert dom.stdout.count('<table class="grid"') >= sum(1 for r in results if r["device_map"])
    shot = tmp_path / "report.png"
    screenshot = subprocess.run(
        [*browser, "--hide-scrollbars", "--window-size=1200,2000", f"--screenshot={shot}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    for log in (dom.stderr, screenshot.stderr):
        assert not re.search(r"CONSOLE|Uncaught|Refused to|net::ERR", log), log[-3000:]
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000, len(png)  # a rendered page, not a blank one

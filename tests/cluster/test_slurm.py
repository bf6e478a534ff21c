"""`ds-doctor run` under a real Slurm: three compute nodes on this machine (network namespaces with their own
addresses and host names, tests/cluster/slurm.py), the sbatch example of docs/cluster.md as it is written, srun
with a node killed mid-run, and Slurm's own variables for a step inside a larger allocation. Marked multirank;
skipped with the reason where it cannot run (not root, no network namespaces, slurm-wlm or munge missing)."""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ds_doctor.reports.model import validate
from tests.bounds import GENEROUS_S
from tests.cluster import slurm
from tests.cluster.lab import Lab, lab

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.multirank
VENV_BIN = str(Path(sys.executable).parent)  # ds-doctor's console script, on PATH inside srun
ACROSS = ("consistency[fingerprint-ws2-n2]", "comm[all_reduce-ws2-n2]")
SELECTION = '--nproc 1 -k "consistency or all_reduce-ws2-n2"'


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, dict[str, str], Path]]:
    """The cluster, up (every node idle) for the module and torn down after it: every process in its namespaces,
    the namespaces, the folder."""
    missing = slurm.missing_programs()
    if missing:
        pytest.skip(missing)
    root = tmp_path_factory.mktemp("slurm")
    with lab(root, slurm.NODES, hub=True) as made:
        env = slurm.start(root, made, VENV_BIN)
        yield made, {**env, "PYTHONPATH": str(ROOT), "HOME": str(root)}, root


def the_report(out: Path) -> dict[str, Any]:
    (path,) = out.glob("ds-doctor-*.json")  # one report, written by node 0, in the folder every node shares
    data = json.loads(path.read_text())
    validate(data)
    return data


def assert_across_passed_on_both_hosts(data: dict[str, Any]) -> None:
    assert data["hardware"]["host"] == "dsdr-n1"
    assert [(n["node"], n["host"]) for n in data["nodes"]] == [(0, "dsdr-n1"), (1, "dsdr-n2")]
    results = {r["case"]: r for r in data["results"]}
    for case in ACROSS:
        assert results[case]["outcome"] == "pass" and results[case]["nodes"] == 2, (
            case,
            results[case]["reason"],
        )
        assert sorted(r["node"] for r in results[case]["ranks"]) == [0, 1]


def test_srun_gives_each_task_its_steps_nodes_inside_a_larger_allocation(
    cluster: tuple[Lab, dict[str, str], Path],
) -> None:
    """`srun -N2 -r1` in an allocation of three: the step is dsdr-n[2-3], its node 0 is dsdr-n2 (the job's first
    host, dsdr-n1, is not in it), SLURM_NODEID counts within the step."""
    made, env, _ = cluster
    show = (
        "import os; from ds_doctor.cluster.nodes import from_slurm; c = from_slurm(os.environ); "
        "print(os.environ['SLURMD_NODENAME'], c.nnodes, c.node_rank, c.endpoint, c.rdzv_id)"
    )
    done = made.run(
        "hub",
        ["salloc", "-N3", "srun", "-N2", "-r1", "--ntasks-per-node=1", sys.executable, "-c", show],
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    job = re.search(r"Granted job allocation (\d+)", done.stderr).group(1)  # type: ignore[union-attr]
    assert sorted(done.stdout.splitlines()) == [
        f"dsdr-n2 2 0 dsdr-n2:29400 slurm-{job}",
        f"dsdr-n3 2 1 dsdr-n2:29400 slurm-{job}",
    ]


def sbatch_example() -> str:
    """docs/cluster.md's sbatch script, changed only where this cluster differs from the one it was written for:
    two nodes, no GPUs (no gres to ask for), the venv's ds-doctor, a short selection. Each change must find its
    text, so the script tested is the one documented."""
    docs = (ROOT / "docs" / "cluster.md").read_text()
    (script,) = re.findall(r"```sh\n(#!/bin/bash\n#SBATCH .*?)```", docs, re.S)
    for old, new in (
        ("--nodes=4", "--nodes=2"),
        (" --gpus-per-node=8", ""),
        ("/opt/ds-doctor/.venv/bin/ds-doctor", f"{VENV_BIN}/ds-doctor"),
        ("--level 2", f"--level 2 {SELECTION}"),
    ):
        assert old in script, f"docs/cluster.md's sbatch example no longer has {old!r}"
        script = script.replace(old, new, 1)
    return script


def wait_for_job(made: Lab, env: dict[str, str], job: str, timeout: float) -> str:
    """The job's ExitCode once it left the queue (polled: `sbatch --wait` polls every few seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = made.run("hub", ["scontrol", "show", "job", job], timeout=20, env=env).stdout
        state = re.search(r"JobState=(\w+)", shown)
        if state and state.group(1) not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return re.search(r"ExitCode=(\S+)", shown).group(1)  # type: ignore[union-attr]
        time.sleep(0.5)
    raise AssertionError(f"job {job} still not done after {timeout:.0f} s")


def test_the_sbatch_example_of_the_docs_runs_one_ds_doctor_per_node_and_node_0_reports_both(
    cluster: tuple[Lab, dict[str, str], Path],
) -> None:
    made, env, root = cluster
    (root / "job.sh").write_text(sbatch_example())
    submitted = made.run(
        "hub",
        ["sbatch", "--parsable", f"--chdir={root}", f"--output={root}/slurm-%j.out", str(root / "job.sh")],
        timeout=30,
        env=env,
    )
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    code = wait_for_job(made, env, job, timeout=150)
    log = (root / f"slurm-{job}.out").read_text(errors="replace")
    assert code == "0:0", log[-4000:]
    assert "node 1: the report is written on node 0 (dsdr-n1)" in log
    assert_across_passed_on_both_hosts(the_report(root / "ds-doctor" / job))


def ds_doctor_on(made: Lab, host: str) -> psutil.Process | None:
    """The `ds-doctor run` process a task started on `host` (not its torchrun or ranks)."""
    inside = set(made.pids_in(host))
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["pid"] in inside and len(cmdline) > 2 and cmdline[1].endswith("/ds-doctor"):
            return proc
    return None


def ds_doctor_processes(made: Lab) -> list[str]:
    inside = set(made.pids(slurm.NODES))
    return [
        " ".join(p.info["cmdline"] or [])[:200]
        for p in psutil.process_iter(["pid", "cmdline"])
        if p.info["pid"] in inside and "doctor" in " ".join(p.info["cmdline"] or [])
    ]


def test_a_node_killed_mid_run_under_srun_is_named_by_node_0_within_the_documented_bound(
    cluster: tuple[Lab, dict[str, str], Path],
) -> None:
    """The cases across the nodes before the kill pass on both hosts; node_faults waits in a named stage, node 1's
    ds-doctor is killed (SIGKILL, as the OOM killer would), and node 0 names it and exits within the case's
    timeout + the closing exchange's wait (docs/cluster.md: min(30 s, --join-timeout))."""
    made, env, root = cluster
    out, join_timeout, case_timeout = root / "killed", 15, 60
    command = [
        "srun",
        "-N2",
        "--ntasks-per-node=1",
        "ds-doctor",
        "run",
        "--level",
        "3",
        "--nproc",
        "1",
        "-k",
        "consistency or all_reduce-ws2-n2 or node_faults",
        "--join-timeout",
        str(join_timeout),
        "--out",
        str(out),
    ]
    srun = made.start(
        "hub",
        command,
        root / "srun.log",
        {**env, "DS_DOCTOR_EXTRA_PROBES": "tests.resources.node_fault_probes"},
    )
    deadline = time.monotonic() + 120
    while not any(
        "waiting for a kill" in b.read_text(errors="replace")
        for b in out.glob("run-dsdr-n1-*/ws2-n2-cpu-0/heartbeat-rank*.json")
    ):
        assert time.monotonic() < deadline and srun.poll() is None, (root / "srun.log").read_text()[-3000:]
        time.sleep(0.2)
    victim = ds_doctor_on(made, "dsdr-n2")
    assert victim is not None
    victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    srun.wait(timeout=case_timeout + join_timeout + 60)
    took = time.monotonic() - killed
    log = (root / "srun.log").read_text(errors="replace")
    # the case's timeout + the closing exchange's wait on an idle machine; a node waiting for the dead one: for ever
    assert took <= case_timeout + min(30, join_timeout) + GENEROUS_S, (
        f"node 0 took {took:.0f} s after node 1 died\n{log[-3000:]}"
    )
    data = the_report(out)
    assert_across_passed_on_both_hosts(data)
    results = {r["case"]: r for r in data["results"]}
    waiting = results["node_faults[wait-then-reduce-ws2-n2]"]
    assert waiting["outcome"] in ("error", "timeout")
    assert [r for r in waiting["ranks"] if r["node"] == 1 and "on node 1" in r["reason"]], waiting["ranks"]
    assert "node 1 (dsdr-n2) did not answer the closing exchange" in results["cluster[node1]"]["reason"]
    assert re.search(r"dsdr-n2: task 1: Killed", log), log[-2000:]  # srun saw it too
    # and nothing of ds-doctor's is left on either node (torchrun, ranks): left behind, they stay for ever
    deadline = time.monotonic() + GENEROUS_S
    while (left := ds_doctor_processes(made)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == []
    print(f"node 0 finished {took:.1f} s after node 1 was killed")

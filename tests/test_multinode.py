"""Several nodes for real: several `ds-doctor run` processes on 127.0.0.1 joined through torchrun's c10d
rendezvous (gloo): the refusals and the bounds. A run across two hosts of their own addresses, whose cases pass and
whose report node 0 writes, is tests/cluster/test_netns.py; under Slurm, tests/cluster/test_slurm.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.bounds import GENEROUS_S
from tests.cluster import slurm
from tests.test_e2e import leftover_processes

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.multirank


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def node(
    rank: int, port: int, out: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    command = [
        sys.executable,
        "-m",
        "ds_doctor.cli",
        "run",
        "--nnodes",
        "2",
        "--node-rank",
        str(rank),
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        f"test-{port}",
        "--out",
        str(out / f"node{rank}"),
        *args,
    ]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen(
        command, env=full_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(*procs: subprocess.Popen[str], timeout: float = 400) -> list[tuple[int, str, str]]:
    out = []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        out.append((proc.returncode, stdout, stderr))
    return out


def test_a_node_with_another_selection_stops_both_with_one_line(tmp_path: Path) -> None:
    port = free_port()
    started = time.monotonic()
    results = finish(
        node(0, port, tmp_path, "-k", "consistency"), node(1, port, tmp_path, "-k", "comm"), timeout=120
    )
    for code, _, err in results:
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert (
            err.startswith("ds-doctor: error: the nodes disagree on what to run: node 1")
            and "other -k" in err
        )
    assert time.monotonic() - started < GENEROUS_S  # a node waiting for the other: its --join-timeout, 300 s


def test_a_node_that_never_joins_is_named_within_the_join_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    ((code, out, err),) = finish(
        node(0, free_port(), tmp_path, "--level", "1", "--join-timeout", "5", "--json"), timeout=120
    )
    assert code == 1, err[-2000:]
    (result,) = json.loads(out)["results"]
    assert result["case"] == "cluster[node1]" and result["outcome"] == "error"
    assert "node 1 did not join within --join-timeout 5 s" in result["reason"]
    assert time.monotonic() - started < GENEROUS_S  # --join-timeout 5 not applied: the default 300 s


@pytest.mark.skipif(
    os.geteuid() == 0 and slurm.missing_programs() is None,
    reason="tests/cluster/test_slurm.py kills a node's ds-doctor under srun, on hosts of their own",
)
def test_a_node_killed_mid_run_is_named_and_every_process_is_gone_in_time(tmp_path: Path) -> None:
    extra = {"DS_DOCTOR_EXTRA_PROBES": "tests.resources.node_fault_probes"}
    port = free_port()
    # one rank per node; a join timeout that also bounds the closing exchange's wait for the dead node
    one_rank = ("--level", "3", "-k", "node_faults", "--nproc", "1", "--join-timeout", "15")
    zero = node(0, port, tmp_path, *one_rank, "--json", env=extra)
    one = node(1, port, tmp_path, *one_rank, env=extra)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        beats = list((tmp_path / "node0").glob("run-*/ws*-n2-cpu-0/heartbeat-rank*.json"))
        if any("waiting for a kill" in b.read_text() for b in beats):
            break
        time.sleep(0.2)
    else:
        finish(zero, one, timeout=5)
        raise AssertionError("the case across the nodes never started")
    one.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    ((code, out, err),) = finish(zero, timeout=200)
    took = time.monotonic() - killed
    assert code == 1, err[-3000:]
    # the case's timeout + 15 s closing on an idle machine; a node waiting for the dead one: the store's 540 s
    assert took <= 60 + 15 + GENEROUS_S, f"node 0 took {took:.0f} s after node 1 died"
    one.wait(timeout=10)
    deadline = time.monotonic() + GENEROUS_S  # processes left behind stay for ever
    while leftover_processes(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftover_processes(str(tmp_path)) == []
    results = {r["case"]: r for r in json.loads(out)["results"]}
    waiting = results["node_faults[wait-then-reduce-ws2-n2]"]
    assert waiting["outcome"] in ("error", "timeout")
    remote = [r for r in waiting["ranks"] if r["node"] == 1]
    assert remote and all("on node 1" in r["reason"] for r in remote), waiting["ranks"]
    assert results["node_faults[after-ws2-n2]"]["reason"].startswith(
        "not run: the launch across the nodes ended in"
    )
    assert "did not answer the closing exchange" in results["cluster[node1]"]["reason"]

"""A rogue process at the rendezvous, for real on 127.0.0.1: it connects to the store node 0 hosts while the nodes
meet and writes what it likes. What it writes for a node is checked (one line naming the node, exit 2; with a job
secret, an answer without the secret's seal is refused), and the pickles it plants where torchrun's dynamic c10d
rendezvous keeps its state are never loaded: ds-doctor's launches use the static rendezvous."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.test_multinode import ROOT, finish, free_port, node

pytestmark = pytest.mark.multirank

ROGUE = textwrap.dedent("""\
    import datetime as dt, json, pickle, sys, time
    import torch.distributed as dist

    port, rdzv_id, forged, marker, seconds = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])

    class Bomb:  # loading it creates the marker: what a rogue would make run code
        def __reduce__(self):
            return (open, (marker, "w"))

    planted = pickle.dumps((Bomb(), 0))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=dt.timedelta(seconds=2))
            for name in ("handshake", "closing", "ws2-n2-0"):
                # where torchrun's c10d rendezvous keeps its state (base64 of a pickle), for every launch it could be
                import base64
                store.set(f"torch.rendezvous.{rdzv_id}-{name}", base64.b64encode(planted).decode())
            if forged:
                store.set(f"ds-doctor/{rdzv_id}-handshake/said/1", forged)
        except Exception:
            pass
        time.sleep(0.2)
""")


def rogue(port: int, rdzv_id: str, forged: str, marker: Path, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", ROGUE, str(port), rdzv_id, forged, str(marker), str(seconds)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def node_one_answer(**fields: object) -> str:
    """What a rogue writes for node 1: a handshake answer of the shape the exchange carries."""
    body = {"node": 1, "host": "rogue", "plan_hash": "x", "env": {}, "hardware": {}, **fields}
    return json.dumps({"node": 1, "body": json.dumps(body)})


def test_a_rogue_answer_for_a_node_is_one_line_naming_it(tmp_path: Path) -> None:
    """Was `KeyError: 'version'`, exit 3, from a process that answered for node 1 without that field."""
    port = free_port()
    marker = tmp_path / "rogue-ran-code"
    intruder = rogue(port, f"test-{port}", node_one_answer(), marker, 40)
    try:
        ((code, _, err),) = finish(
            node(0, port, tmp_path, "--level", "1", "--join-timeout", "8"), timeout=120
        )
    finally:
        intruder.kill()
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert (
        err.strip()
        == "ds-doctor: error: a node's handshake answer is not ds-doctor's: node 1: version missing"
    )
    assert not marker.exists()


def test_with_a_job_secret_a_complete_rogue_answer_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "job-secret"
    secret.write_text("0123456789abcdef0123456789abcdef\n")
    secret.chmod(0o600)
    port = free_port()
    intruder = rogue(port, f"test-{port}", node_one_answer(version="0.1.0"), tmp_path / "marker", 40)
    try:
        ((code, _, err),) = finish(
            node(
                0,
                port,
                tmp_path,
                "--level",
                "1",
                "--join-timeout",
                "8",
                env={"DS_DOCTOR_JOB_SECRET_FILE": str(secret)},
            ),
            timeout=120,
        )
    finally:
        intruder.kill()
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "node 1: an answer at node 1's key failed the job secret check (not node 1's)" in err


def test_pickles_planted_at_the_rendezvous_are_never_loaded_and_the_run_passes(tmp_path: Path) -> None:
    """Two real nodes and a launch across them, while a rogue keeps writing, at every launch's c10d state key, a
    pickle whose loading would create a file. With the dynamic c10d rendezvous every agent unpickles that state."""
    secret = tmp_path / "job-secret"
    secret.write_text("fedcba9876543210fedcba9876543210\n")
    secret.chmod(0o600)
    env = {"DS_DOCTOR_JOB_SECRET_FILE": str(secret)}
    port = free_port()
    marker = tmp_path / "rogue-ran-code"
    intruder = rogue(port, f"test-{port}", "", marker, 150)
    across = ("--level", "2", "-k", "comm and all_reduce", "--nproc", "1", "--json")
    try:
        (zero, one) = finish(
            node(0, port, tmp_path, *across, env=env), node(1, port, tmp_path, *across, env=env), timeout=300
        )
    finally:
        intruder.kill()
    assert zero[0] == 0 and one[0] == 0, zero[2][-3000:] + one[2][-3000:]
    results = {r["case"]: r["outcome"] for r in json.loads(zero[1])["results"]}
    assert results.get("comm[all_reduce-ws2-n2]") == "pass", results
    assert not marker.exists()

"""An answer in the nodes' exchange is bound to its run and read within bounds: sealed over node 0's fresh nonce
(an answer or a roster sealed in an earlier run of the same job id is refused), its seal checked before its body is
parsed, its size and depth bounded (a deep nesting is a refusal, never a RecursionError and exit 3), and the run's
own record of the exchange readable by its owner only. The replays are real: captured from a first exchange of two
real nodes on 127.0.0.1 and written into a second exchange of the same job id."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ds_doctor.cluster.exchange import (
    EXCHANGED,
    MAX_ANSWER_BYTES,
    PAYLOAD,
    SECRET_ENV,
    UNANSWERED,
    Refused,
    exchange,
    exchange_command,
    opened,
    seal,
    sealed,
)
from ds_doctor.cluster.nodes import Cluster
from ds_doctor.files import write_atomic
from ds_doctor.rundir import RunDir
from tests.test_multinode import ROOT, free_port

SECRET = b"0123456789abcdef0123456789abcdef"
NONCE = "a" * 32
EARLIER = "b" * 32  # node 0's nonce in an earlier run of the same job id
DEEP = "[" * 100_000 + "]" * 100_000  # Python's json recursed into it: RecursionError, exit 3


@pytest.fixture
def job_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "job-secret"
    path.write_bytes(SECRET + b"\n")
    path.chmod(0o600)
    monkeypatch.setenv(SECRET_ENV, str(path))
    yield path


def answer(body: str, *, node: int = 1, nonce: str = NONCE, secret: bytes | None = SECRET) -> bytes:
    return sealed(secret, "job-handshake", node, body, nonce=nonce).encode()


def test_an_answer_is_read_only_when_it_is_the_nodes_and_sealed_for_this_run() -> None:
    body = json.dumps({"x": 1})
    good = answer(body)
    assert opened(good, 1, "job-handshake", SECRET, nonce=NONCE) == ({"x": 1}, None)
    failed = f"it fails the job secret check ({SECRET_ENV})"
    assert opened(good, 1, "job-closing", SECRET, nonce=NONCE)[1] == failed  # another exchange's
    assert (
        opened(good, 2, "job-handshake", SECRET, nonce=NONCE)[1]
        == "not a ds-doctor answer (fields node and body)"
    )
    assert opened(good, 1, "job-handshake", b"t" * 32, nonce=NONCE)[1] == failed
    unsealed = json.dumps({"node": 1, "body": body}).encode()
    assert opened(unsealed, 1, "job-handshake", SECRET, nonce=NONCE)[1] == failed
    assert opened(unsealed, 1, "job-handshake", None, nonce=NONCE) == ({"x": 1}, None)  # no secret: as before
    as_bool = json.dumps({"node": True, "body": body}).encode()
    assert (
        opened(as_bool, 1, "job-handshake", None, nonce=NONCE)[1]
        == "not a ds-doctor answer (fields node and body)"
    )
    pickle = b"\x80\x04cos\nsystem\n"
    assert opened(pickle, 1, "job-handshake", None, nonce=NONCE) == (
        None,
        "its answer: not JSON: not UTF-8 text",
    )


def test_an_answer_sealed_for_another_run_is_refused_as_a_replay() -> None:
    replayed = answer(json.dumps({"x": 1}), nonce=EARLIER)
    assert opened(replayed, 1, "job-handshake", SECRET, nonce=EARLIER) == ({"x": 1}, None)
    assert opened(replayed, 1, "job-handshake", SECRET, nonce=NONCE) == (
        None,
        "it is sealed for another run of this job id, not this one (an earlier run's answer, replayed)",
    )
    # the seal covers the nonce it names: naming this run's nonce over an earlier run's seal fails the seal
    renamed = json.loads(replayed)
    renamed["nonce"] = NONCE
    assert opened(json.dumps(renamed).encode(), 1, "job-handshake", SECRET, nonce=NONCE)[1] == (
        f"it fails the job secret check ({SECRET_ENV})"
    )


@pytest.mark.parametrize("secret", [SECRET, None], ids=["sealed", "no-secret"])
def test_a_deeply_nested_answer_is_refused_not_a_recursion_error(secret: bytes | None) -> None:
    """Was RecursionError (exit 3) from json.loads, in the envelope before any seal was checked."""
    for raw in (DEEP.encode(), b'{"node": 1, "body": "x", "mac": ' + DEEP.encode() + b"}"):
        assert opened(raw, 1, "job-handshake", secret, nonce=NONCE) == (
            None,
            "its answer: nested more than 2 levels deep",
        )
    assert opened(answer(DEEP, secret=secret), 1, "job-handshake", secret, nonce=NONCE) == (
        None,
        "its body: nested more than 64 levels deep",
    )


def test_the_seal_is_checked_before_the_body_is_parsed() -> None:
    forged = json.dumps({"node": 1, "nonce": NONCE, "body": DEEP, "mac": "0" * 64}).encode()
    assert (
        opened(forged, 1, "job-handshake", SECRET, nonce=NONCE)[1]
        == f"it fails the job secret check ({SECRET_ENV})"
    )


def test_a_mac_or_body_of_any_text_is_a_refusal_not_an_error() -> None:
    """A mac that is not ASCII made hmac.compare_digest raise TypeError; a lone surrogate in the body made the seal's
    encode raise UnicodeEncodeError: both exit 3."""
    failed = (None, f"it fails the job secret check ({SECRET_ENV})")
    not_ascii = json.dumps({"node": 1, "nonce": NONCE, "body": "{}", "mac": "é" * 64}).encode()
    assert opened(not_ascii, 1, "job-handshake", SECRET, nonce=NONCE) == failed
    surrogate = b'{"node": 1, "nonce": "' + NONCE.encode() + b'", "body": "\\ud800", "mac": "00"}'
    assert opened(surrogate, 1, "job-handshake", SECRET, nonce=NONCE) == failed


def test_an_answer_past_the_size_bound_is_refused_unparsed() -> None:
    huge = b"[" * (MAX_ANSWER_BYTES + 1)  # parsed, it would be refused for its depth instead
    assert opened(huge, 1, "job-handshake", SECRET, nonce=NONCE) == (None, "larger than 16 MiB")
    assert opened(huge, 1, "job-handshake", None, nonce=NONCE) == (None, "larger than 16 MiB")


# ---- for real: the exchange's child processes on 127.0.0.1 --------------------------------------------------------


def two_nodes(port: int, rdzv_id: str) -> tuple[Cluster, Cluster]:
    """Node 0 and node 1 of one job at 127.0.0.1:`port`."""
    zero, one = (
        Cluster(nnodes=2, node_rank=rank, host="127.0.0.1", port=port, rdzv_id=rdzv_id) for rank in (0, 1)
    )
    return zero, one


def start_node(cluster: Cluster, folder: Path, payload: Any, wait_s: float) -> subprocess.Popen[bytes]:
    """A node's exchange child, as `exchange` starts it (its payload written first)."""
    folder.mkdir(parents=True)
    write_atomic(folder / PAYLOAD, json.dumps(payload))
    with (folder / "log").open("wb") as log:
        return subprocess.Popen(
            exchange_command(cluster, folder, "handshake", wait_s),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def record(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / EXCHANGED).read_text())
    return data


REPLAY = textwrap.dedent("""\
    import datetime as dt, pathlib, sys, time
    import torch.distributed as dist

    port, key, value = int(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3]).read_bytes()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            dist.TCPStore("127.0.0.1", port, is_master=False, timeout=dt.timedelta(seconds=2)).set(key, value)
        except Exception:
            pass
        time.sleep(0.2)
""")


@pytest.mark.multirank
def test_a_sealed_answer_replayed_from_an_earlier_run_of_the_job_id_is_refused(
    tmp_path: Path, job_secret: Path
) -> None:
    """Was: accepted, and node 0 started a launch across the nodes with node 1 absent."""
    rdzv_id = f"replay-{free_port()}"
    zero, one = two_nodes(free_port(), rdzv_id)
    node_one = start_node(one, tmp_path / "first-node1", {"node": 1, "run": "first"}, 30)
    try:
        first = exchange(zero, RunDir(tmp_path / "first-node0"), "handshake", {"node": 0}, 30)
        assert node_one.wait(timeout=60) == 0
    finally:
        node_one.kill()
    assert first == {0: {"node": 0}, 1: {"node": 1, "run": "first"}}
    captured = tmp_path / "captured"  # node 1's sealed answer, as it was in the store
    captured.write_text(record(tmp_path / "first-node0/exchange-handshake-cpu-0")["said"]["1"])

    zero, _ = two_nodes(free_port(), rdzv_id)  # the same job id, node 1 absent, the earlier answer replayed
    key = f"ds-doctor/{rdzv_id}-handshake/said/1"
    replayer = subprocess.Popen(
        [sys.executable, "-c", REPLAY, str(zero.port), key, str(captured)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        second = exchange(zero, RunDir(tmp_path / "second-node0"), "handshake", {"node": 0}, 8)
    finally:
        replayer.kill()
        replayer.wait()
    assert second[0] == {"node": 0}
    refused = second.get(1)
    assert isinstance(refused, Refused), second
    assert (
        refused.why
        == "it is sealed for another run of this job id, not this one (an earlier run's answer, replayed)"
    )


REPLAYED_NODE_0 = textwrap.dedent("""\
    import datetime as dt, json, pathlib, sys, time
    import torch.distributed as dist

    port, prefix, keys = int(sys.argv[1]), sys.argv[2], json.loads(pathlib.Path(sys.argv[3]).read_text())
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=dt.timedelta(seconds=60))
    for key, value in keys.items():
        store.set(prefix + key, value)
    print("ready", flush=True)
    time.sleep(60)
""")


@pytest.mark.multirank
def test_a_roster_replayed_from_an_earlier_run_is_refused_by_the_node_that_reads_it(
    tmp_path: Path, job_secret: Path
) -> None:
    """A store at the endpoint that holds an earlier run's nonce, roster and node 0 answer, all sealed with the job
    secret as node 0 sealed them then: node 1 seals its answer for that nonce, but the roster names the nonce node 1
    drew in that run, not in this one, so node 1 refuses it rather than take the earlier run for this one."""
    port = free_port()
    _, one = two_nodes(port, f"replay-{port}")
    exchange_id = one.launch_id("handshake")
    earlier_mine = secrets.token_hex(16)
    roster = json.dumps({"0": None, "1": earlier_mine})
    keys = {
        "nonce": EARLIER,
        "said/0": sealed(SECRET, exchange_id, 0, json.dumps({"node": 0}), nonce=EARLIER),
        "roster": sealed(SECRET, f"{exchange_id}/roster", 0, roster, nonce=EARLIER),
    }
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    host = subprocess.Popen(
        [
            sys.executable,
            "-c",
            REPLAYED_NODE_0,
            str(port),
            f"ds-doctor/{exchange_id}/",
            str(tmp_path / "keys.json"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert host.stdout is not None and host.stdout.readline().strip() == "ready"
        node_one = start_node(one, tmp_path / "node1", {"node": 1}, 20)
        code = node_one.wait(timeout=120)
    finally:
        host.kill()
        host.wait()
    assert code == 1 and not (tmp_path / "node1" / EXCHANGED).exists()
    assert (tmp_path / "node1" / UNANSWERED).read_text() == (
        f"the roster at 127.0.0.1:{port} is not this run's: it names node 1 with a nonce other than the one it drew "
        "(an earlier run's roster, replayed)\n"
    )


@pytest.mark.multirank
def test_the_exchange_record_is_readable_by_its_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    port = free_port()
    zero, _ = two_nodes(port, f"mode-{port}")
    old = os.umask(0)
    try:
        nodes = exchange(zero, RunDir(tmp_path / "node0"), "handshake", {"node": 0}, 1)
    finally:
        os.umask(old)
    assert nodes == {0: {"node": 0}}
    folder = tmp_path / "node0/exchange-handshake-cpu-0"
    for name in (EXCHANGED, PAYLOAD):
        assert (folder / name).stat().st_mode & 0o777 == 0o600, name
    assert seal(None, "x", 0, "{}", nonce=NONCE) is None

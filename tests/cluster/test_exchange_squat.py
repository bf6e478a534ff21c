"""A process at node 0's port without the job secret, squatting on the exchange: it writes an answer at a node's key
before the node comes, or over the node's answer, or it hosts a store with a nonce and never a roster. Node 0 passes
over an answer whose seal does not check and waits on for the node's own (it stopped at the first answer and refused
the real node 1 as failing the secret check); a key that held only such answers is refused naming the key, not the
node; a node words a roster that does not hold its answer by what it names (it always said "replayed"); and a node
against a squatter waits for the roster the join timeout and a few seconds, not a minute more."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ds_doctor.cluster.exchange import (
    ROSTER_SLACK_S,
    SECRET_ENV,
    ExchangeError,
    Refused,
    _await_roster,
    _gather,
    _roster,
    exchange,
    sealed,
)
from ds_doctor.cluster.nodes import Cluster
from ds_doctor.rundir import RunDir
from tests.bounds import GENEROUS_S
from tests.cluster.test_exchange_seal import NONCE, SECRET, record, start_node, two_nodes
from tests.test_multinode import ROOT, free_port

UNSEALED = json.dumps({"node": 1, "body": "{}", "mac": "00"})  # what a process without the secret can write
FAILED = "an answer at node 1's key failed the job secret check (not node 1's)"

SQUATTER = textwrap.dedent("""\
    import datetime as dt, sys, time
    import torch.distributed as dist

    port, key, forged, once = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "once"
    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=dt.timedelta(seconds=2))
            if store.check([key.rsplit("/", 2)[0] + "/nonce"]):
                store.set(key, forged)
                print("wrote", flush=True)
                if once:
                    break
        except Exception:
            pass
        time.sleep(0.1)
""")


@pytest.fixture
def job_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """SECRET in a file only its owner reads, named for the exchange's children (they inherit the environment)."""
    path = tmp_path / "job-secret"
    path.write_bytes(SECRET + b"\n")
    path.chmod(0o600)
    monkeypatch.setenv(SECRET_ENV, str(path))
    return path


def squatter(port: int, key: str, *, once: bool) -> subprocess.Popen[str]:
    """A process without the secret that writes UNSEALED at `key` as soon as node 0's nonce is there: once, or on
    and on. Returned once it has imported torch and is ready to write: on a loaded box that import alone can outlast
    a short join timeout, which would leave the squatter's answers out of the test."""
    rogue = subprocess.Popen(
        [sys.executable, "-c", SQUATTER, str(port), key, UNSEALED, "once" if once else "always"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert rogue.stdout is not None and rogue.stdout.readline().strip() == "ready"
    return rogue


class Store:
    """The part of torch's store the exchange's waits use, in memory; `on_delete` runs after a key is deleted."""

    def __init__(self, **keys: str) -> None:
        self.keys = {key.replace("_", "/"): value.encode() for key, value in keys.items()}
        self.on_delete: Any = None

    def check(self, keys: list[str]) -> bool:
        return all(key in self.keys for key in keys)

    def get(self, key: str) -> bytes:
        return self.keys[key]

    def set(self, key: str, value: str) -> None:
        self.keys[key] = value.encode()

    def delete_key(self, key: str) -> bool:
        found = self.keys.pop(key, None) is not None
        if self.on_delete is not None:
            self.on_delete(self)
        return found


def args(**fields: Any) -> argparse.Namespace:
    """A node's exchange arguments: node 1 of two, job `job-handshake`."""
    base = {
        "host": "127.0.0.1",
        "port": 1,
        "node": 1,
        "nnodes": 2,
        "exchange_id": "job-handshake",
        "wait": 5.0,
    }
    return argparse.Namespace(**{**base, **fields})


# ---- in memory: node 0's wait for the answers, a node's wait for the roster, the roster's wording -----------------


def test_node_0_passes_over_an_answer_that_fails_the_seal_and_takes_the_nodes_own(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The node's own answer comes after the squatter's, in the key the squatter's left empty when node 0 deleted
    it. Was: the first answer at the key was taken and refused, and the node's own never read."""
    own = sealed(SECRET, "job-handshake", 1, json.dumps({"node": 1}), nonce=NONCE)
    store = Store(said_1=UNSEALED)
    store.on_delete = lambda s: s.set("said/1", own)  # the node, finding its key empty, answers again
    taken, refused = _gather(store, args(node=0), SECRET, NONCE, b"node 0's own")
    assert taken == {0: b"node 0's own", 1: own.encode()} and refused == {}
    assert capsys.readouterr().out == f"node 0: passed over an answer at node 1's key: {FAILED}\n"


def test_a_key_that_holds_only_answers_that_fail_the_seal_is_refused_naming_the_key() -> None:
    store = Store(said_1=UNSEALED)
    taken, refused = _gather(store, args(node=0, wait=0.5), SECRET, NONCE, b"own")
    assert taken == {0: b"own"} and refused == {1: FAILED}
    assert not store.check(["said/1"])  # deleted, so the node would see its key empty and answer again


def test_a_node_answers_again_where_its_answer_was_deleted_until_the_roster_comes() -> None:
    store = Store()  # node 0 deleted what was at the node's key (its own answer, written over)
    checks = 0

    def roster_after_two(keys: list[str]) -> bool:
        nonlocal checks
        if keys == ["roster"]:
            checks += 1
            return checks > 2
        return Store.check(store, keys)

    store.check = roster_after_two  # type: ignore[method-assign]
    assert _await_roster(store, "said/1", "mine", 5.0)
    assert store.keys["said/1"] == b"mine"
    assert not _await_roster(Store(), "said/1", "mine", 0.3)  # no roster: the wait ends, no error


@pytest.mark.parametrize(
    ("named", "secret", "says"),
    [
        (None, SECRET, "node 0 took an answer at node 1's key that names no nonce of node 1's"),
        ("c" * 32, None, "another process answered in its place, or an earlier run's roster is replayed"),
        (
            "c" * 32,
            SECRET,
            "is not this run's: it names node 1 with a nonce other than the one it drew (an earlier",
        ),
    ],
    ids=["no-nonce", "other-nonce-no-secret", "other-nonce-sealed"],
)
def test_a_roster_without_the_nodes_answer_is_worded_by_what_it_names(
    named: str | None, secret: bytes | None, says: str
) -> None:
    """Was "an earlier run's roster, replayed" for each, where node 0 had taken another process's answer."""
    roster = sealed(secret, "job-handshake/roster", 0, json.dumps({"0": None, "1": named}), nonce=NONCE)
    with pytest.raises(ExchangeError) as caught:
        _roster(roster.encode(), args(), secret, NONCE, "d" * 32)
    assert says in str(caught.value), caught.value
    assert ("replayed" in str(caught.value)) == (named is not None)


# ---- for real: the exchange's child processes and a squatter on 127.0.0.1 -----------------------------------------


@pytest.mark.multirank
def test_an_answer_written_first_at_a_nodes_key_does_not_shut_the_node_out(
    tmp_path: Path, job_secret: Path
) -> None:
    """A15: the squatter writes at node 1's key as soon as node 0's nonce is there, and node 1 comes after it. Was:
    node 0 refused node 1 as failing the secret check, and node 1 stopped on an "earlier run's roster, replayed"."""
    port = free_port()
    zero, one = two_nodes(port, f"squat-{port}")
    said: dict[str, Any] = {}
    # 40 s: node 0's wait runs while the squatter and then node 1 each import torch, one after the other (20 s ran
    # out once under `make test`'s load: node 0 wrote its roster without node 1 and closed its store)
    node_0 = threading.Thread(
        target=lambda: said.update(
            nodes=exchange(zero, RunDir(tmp_path / "node0"), "handshake", {"node": 0}, 40)
        )
    )
    node_0.start()
    rogue = squatter(port, f"ds-doctor/{zero.launch_id('handshake')}/said/1", once=True)
    try:
        assert rogue.stdout is not None and rogue.stdout.readline().strip() == "wrote"
        node_1 = start_node(one, tmp_path / "node1", {"node": 1}, 40)
        assert node_1.wait(timeout=GENEROUS_S) == 0, (tmp_path / "node1/log").read_text()[-2000:]
    finally:
        rogue.kill()
        rogue.wait()
        node_0.join(GENEROUS_S)
    assert said["nodes"] == {0: {"node": 0}, 1: {"node": 1}}
    assert sorted(record(tmp_path / "node1")["said"]) == ["0", "1"]
    log = (tmp_path / "node0/exchange-handshake-cpu-0/torchrun.log").read_text()
    assert f"node 0: passed over an answer at node 1's key: {FAILED}" in log


@pytest.mark.multirank
def test_a_node_whose_key_held_only_a_squatters_answers_is_refused_naming_the_key(
    tmp_path: Path, job_secret: Path
) -> None:
    port = free_port()
    zero, _ = two_nodes(port, f"squat-{port}")
    rogue = squatter(port, f"ds-doctor/{zero.launch_id('handshake')}/said/1", once=False)
    try:  # 6 s: on a loaded box node 0's launch can take most of 3 before its nonce is there for the squatter
        nodes = exchange(zero, RunDir(tmp_path), "handshake", {"node": 0}, 6)
    finally:
        rogue.kill()
        rogue.wait()
    assert nodes[0] == {"node": 0}
    assert isinstance(nodes[1], Refused) and nodes[1].why == FAILED, nodes


@pytest.mark.multirank
def test_a_node_against_a_squatter_with_a_nonce_waits_the_join_timeout_and_a_few_seconds(
    tmp_path: Path,
) -> None:
    """A16: a store at the endpoint with a nonce and never a roster. Was 60 s over the join timeout (67 s for
    `--join-timeout 5`), the line naming 65 s."""
    import torch.distributed as dist

    port, wait = free_port(), 2
    one = Cluster(
        nnodes=2, node_rank=1, host="127.0.0.1", port=port, rdzv_id=f"squat-{port}", join_timeout_s=wait
    )
    squat = dist.TCPStore(
        "127.0.0.1", port, is_master=True, wait_for_workers=False, timeout=dt.timedelta(seconds=60)
    )
    squat.set(f"ds-doctor/{one.launch_id('handshake')}/nonce", "c" * 32)
    started = time.monotonic()
    with pytest.raises(ExchangeError) as caught:
        exchange(one, RunDir(tmp_path), "handshake", {"node": 1}, wait)
    elapsed = time.monotonic() - started
    roster_s = wait + ROSTER_SLACK_S
    assert f"no roster from node 0 at 127.0.0.1:{port} within {roster_s:g} s" in str(caught.value)
    assert elapsed < GENEROUS_S, elapsed  # was 2 + 60 s and the child's start
    del squat

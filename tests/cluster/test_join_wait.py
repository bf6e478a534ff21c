"""A node other than node 0 waits `--join-timeout` for node 0's exchange at the endpoint, and no longer: an endpoint
that accepts and never answers held torch's TCPStore client past its own timeout (130 s for `--join-timeout 5`,
until the parent's bound killed it, then a message saying 5 s). Real sockets on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ds_doctor.cluster.exchange import ExchangeError, exchange
from ds_doctor.cluster.nodes import Cluster
from ds_doctor.rundir import RunDir
from tests.bounds import GENEROUS_S
from tests.test_multinode import finish, free_port, node

pytestmark = pytest.mark.multirank

JOIN_S = 2


@pytest.fixture
def silent_endpoint() -> Iterator[int]:
    """A port that accepts every connection and never sends a byte (nor closes one) until the test ends."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:  # the test closed the server
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    server.close()
    for conn in held:
        conn.close()


@pytest.mark.parametrize("endpoint", ["silent", "closed"])
def test_a_node_waits_the_join_timeout_for_node_0_and_says_so(
    endpoint: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    port = request.getfixturevalue("silent_endpoint") if endpoint == "silent" else free_port()
    one = Cluster(
        nnodes=2, node_rank=1, host="127.0.0.1", port=port, rdzv_id=f"join-{port}", join_timeout_s=JOIN_S
    )
    started = time.monotonic()
    with pytest.raises(ExchangeError) as caught:
        exchange(one, RunDir(tmp_path), "handshake", {"node": 1}, JOIN_S)
    assert time.monotonic() - started < 3 * JOIN_S + 10  # was about 130 s against the silent one
    assert str(caught.value).startswith(
        f"the handshake exchange: no answer from 127.0.0.1:{port} within {JOIN_S} s "
        "(node 0's ds-doctor hosts it there); see "
    ), caught.value


def test_run_on_node_1_against_a_silent_endpoint_is_one_line_within_its_join_timeout(
    silent_endpoint: int, tmp_path: Path
) -> None:
    started = time.monotonic()
    ((code, _, err),) = finish(
        node(1, silent_endpoint, tmp_path, "--level", "1", "--join-timeout", str(JOIN_S)), timeout=300
    )
    assert time.monotonic() - started < GENEROUS_S, err  # was about 130 s
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(
        f"ds-doctor: error: the handshake exchange: no answer from 127.0.0.1:{silent_endpoint} within {JOIN_S} s"
    ), err

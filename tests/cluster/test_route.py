"""This node's side of the route to the rendezvous, on this machine's real interfaces: what gloo gets as
GLOO_SOCKET_IFNAME, and what consistency then compares. (The same across two hosts for real:
tests/cluster/test_netns.py.)"""

from __future__ import annotations

import socket

import psutil
import pytest

from ds_doctor.checks.consistency import compare
from ds_doctor.cluster.nodes import Cluster
from ds_doctor.cluster.route import facing
from ds_doctor.collect.fingerprint import fingerprint
from ds_doctor.probe.rankoptions import DEFAULTS
from ds_doctor.run.command import rank_environment


def own_address() -> str | None:
    """An IPv4 address of this machine that is not loopback, if it has one."""
    for addresses in psutil.net_if_addrs().values():
        for a in addresses:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return str(a.address)
    return None


def test_loopback_faces_loopback() -> None:
    where = facing("127.0.0.1", 29400)
    assert where is not None and where.address == "127.0.0.1" and where.loopback
    assert where.interface in psutil.net_if_addrs()


def test_a_host_that_does_not_resolve_faces_nothing() -> None:
    assert facing("no-such-host.invalid", 29400) is None


def test_this_machines_own_address_faces_itself() -> None:
    address = own_address()
    if address is None:
        pytest.skip("this machine has no IPv4 address besides loopback")
    where = facing(address, 29400)
    assert where is not None and where.address == address and not where.loopback


def test_gloo_gets_the_interface_facing_a_remote_rendezvous_unless_the_user_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    address = own_address()
    if address is None:
        pytest.skip("this machine has no IPv4 address besides loopback")
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    cluster = Cluster(nnodes=2, node_rank=1, host=address, port=29400, rdzv_id="r")
    env = rank_environment(DEFAULTS, cluster, across=True)
    assert env["GLOO_SOCKET_IFNAME"] == facing(address, 29400).interface  # type: ignore[union-attr]
    assert env["DS_DOCTOR_CHOSE_GLOO_SOCKET_IFNAME"] == "1"
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "ib0")
    chosen = rank_environment(DEFAULTS, cluster, across=True)
    assert chosen["GLOO_SOCKET_IFNAME"] == "ib0" and "DS_DOCTOR_CHOSE_GLOO_SOCKET_IFNAME" not in chosen


def test_consistency_names_a_socket_interface_the_user_set_differently_not_one_ds_doctor_chose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME that differ between nodes are named; gloo's interface picked by
    ds-doctor per node (names differ from host to host by design) is not compared."""

    def node_print(node: int, **variables: str) -> dict[str, str]:
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "DS_DOCTOR_CHOSE_GLOO_SOCKET_IFNAME"):
            monkeypatch.delenv(name, raising=False)
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        return fingerprint(node, node, "cpu")

    chosen = [
        node_print(0, GLOO_SOCKET_IFNAME="eth0", DS_DOCTOR_CHOSE_GLOO_SOCKET_IFNAME="1"),
        node_print(1, GLOO_SOCKET_IFNAME="ens5", DS_DOCTOR_CHOSE_GLOO_SOCKET_IFNAME="1"),
    ]
    assert not [f for f in compare(chosen) if "SOCKET_IFNAME" in f.message]
    user = [
        node_print(0, GLOO_SOCKET_IFNAME="eth0", NCCL_SOCKET_IFNAME="ib0"),
        node_print(1, GLOO_SOCKET_IFNAME="ens5", NCCL_SOCKET_IFNAME="ib0"),
    ]
    (finding,) = [f for f in compare(user) if "SOCKET_IFNAME" in f.message]
    assert finding.message.startswith("env:GLOO_SOCKET_IFNAME differs across the ranks: 'ens5' on node 1")
    assert finding.severity.value == "warning"
    nccl = [node_print(0, NCCL_SOCKET_IFNAME="ib0"), node_print(1)]
    (finding,) = [f for f in compare(nccl) if "SOCKET_IFNAME" in f.message]
    assert finding.message.startswith("env:NCCL_SOCKET_IFNAME differs across the ranks: '<unset>' on node 1")

"""Two nodes that are two hosts to the network: each `ds-doctor run` in a network namespace of its own, joined by a
veth pair (10.231.0.1 and .2), both with this machine's host name, which resolves to 127.0.0.1 here. What runs on
127.0.0.1 hides, this shows: who hosts torchrun's rendezvous store when the endpoint is an address rather than
the host name, which MASTER_ADDR the ranks get, which interface gloo binds, and a GLOO_SOCKET_IFNAME that only
one node sets, named by consistency. Marked multirank; root only (skipped with the reason otherwise)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ds_doctor.reports.model import validate
from tests.cluster.lab import Lab, lab

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.multirank
HOSTS = ("a", "b")
PORT = 29400
#: across the nodes: the fingerprints, a collective, the pairs' fabric, a ZeRO-3 offload case and FSDP2 (one rank each)
SELECTION = (
    "--level",
    "3",
    "-k",
    "consistency or all_reduce-ws2-n2 or fabric or z3-opt+param-bf16-ws2-n2 or fsdp2-ws2-n2",
    "--nproc",
    "1",
    "--join-timeout",
    "30",
)
ACROSS = {
    "consistency[fingerprint-ws2-n2]",
    "comm[all_reduce-ws2-n2]",
    "fabric[pairs-ws2-n2]",
    "zero_offload[z3-opt+param-bf16-ws2-n2]",
    "optimizer_coverage[fsdp2-ws2-n2]",
}


def ds_doctor(lab: Lab, node: int, out: Path, env: dict[str, str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ds_doctor.cli",
        "run",
        "--nnodes",
        "2",
        "--node-rank",
        str(node),
        "--rdzv-endpoint",
        f"{lab.address[HOSTS[0]]}:{PORT}",
        "--rdzv-id",
        lab.tag,
        "--out",
        str(out / f"node{node}"),
        *SELECTION,
    ]


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One run across the two namespaces; node 1 alone sets GLOO_SOCKET_IFNAME (to its own interface, so the
    run still works), node 0 leaves the choice to ds-doctor."""
    root = tmp_path_factory.mktemp("netns")
    with lab(root, HOSTS) as made:
        base = {**os.environ, "PYTHONPATH": str(ROOT)}
        base.pop("GLOO_SOCKET_IFNAME", None)
        envs = [base, {**base, "GLOO_SOCKET_IFNAME": made.interface[HOSTS[1]]}]
        started = time.monotonic()
        procs = [
            made.start(host, ds_doctor(made, node, root, envs[node]), root / f"node{node}.log", envs[node])
            for node, host in enumerate(HOSTS)
        ]
        for proc in procs:
            proc.wait(timeout=240)
        yield {
            "root": root,
            "lab": made,
            "codes": [p.returncode for p in procs],
            "took": time.monotonic() - started,
            "logs": [(root / f"node{n}.log").read_text(errors="replace") for n in range(2)],
        }


def the_report(root: Path) -> dict[str, Any]:
    (path,) = (root / "node0").glob("ds-doctor-*.json")
    data = json.loads(path.read_text())
    validate(data)
    return data


def test_two_hosts_on_their_own_addresses_run_across_and_node_0_reports_both(
    two_hosts: dict[str, Any],
) -> None:
    assert two_hosts["codes"] == [0, 0], two_hosts["logs"][0][-3000:] + two_hosts["logs"][1][-3000:]
    assert "node 1: the report is written on node 0" in two_hosts["logs"][1]
    data = the_report(two_hosts["root"])
    assert [n["node"] for n in data["nodes"]] == [0, 1]
    across = {r["case"]: r for r in data["results"] if r["node"] is None}
    assert set(across) == ACROSS
    for result in across.values():
        assert result["outcome"] == "pass" and result["nodes"] == 2, (result["case"], result["reason"])
        assert sorted(r["node"] for r in result["ranks"]) == [0, 1]
    assert across["comm[all_reduce-ws2-n2]"]["measures"]["busbw_gbps"] > 0  # bytes crossed the veth pair
    fabric = across["fabric[pairs-ws2-n2]"]
    assert [(row["node_a"], row["node_b"]) for row in fabric["series"]] == [(0, 1)] and fabric["measures"][
        "busbw_gbps"
    ] > 0
    zero3 = across["zero_offload[z3-opt+param-bf16-ws2-n2]"]
    # every node's partitions offloaded, each record saying which node
    assert {(r["node"], r["device"]) for r in zero3["device_map"] if r["role"] == "fp32_partition"} == {
        (0, "cpu"),
        (1, "cpu"),
    }
    markdown = next((two_hosts["root"] / "node0").glob("ds-doctor-*.md")).read_text()
    assert "## Nodes" in markdown and "| `comm[all_reduce-ws2-n2]` | all nodes |" in markdown


def test_the_launch_across_the_hosts_is_torchruns_static_rendezvous_with_each_nodes_rank(
    two_hosts: dict[str, Any],
) -> None:
    """Node 0 hosts the store at the endpoint (10.231.0.1, not this host name's address), each node gives its rank,
    and nothing in the rendezvous is unpickled (c10d's agents unpickle their state from the store)."""
    for node in range(len(HOSTS)):
        (command,) = (two_hosts["root"] / f"node{node}").glob("run-*/ws2-n2-cpu-0/command.txt")
        text = command.read_text()
        assert "--rdzv-backend=static" in text and f"--node-rank={node}" in text and "c10d" not in text, text


def test_a_gloo_interface_set_on_one_node_only_is_named_by_consistency(two_hosts: dict[str, Any]) -> None:
    """Node 1's GLOO_SOCKET_IFNAME is the user's; node 0's was ds-doctor's own pick (not compared: interface names
    differ from host to host by design)."""
    data = the_report(two_hosts["root"])
    (case,) = [r for r in data["results"] if r["case"] == "consistency[fingerprint-ws2-n2]"]
    (finding,) = [f for f in case["findings"] if "GLOO_SOCKET_IFNAME" in f["message"]]
    interface = two_hosts["lab"].interface[HOSTS[1]]
    assert finding["severity"] == "warning"
    assert finding["message"].startswith(
        f"env:GLOO_SOCKET_IFNAME differs across the ranks: {interface!r} on node 1"
    )
    assert not [
        f for f in case["findings"] if "NCCL_SOCKET_IFNAME" in f["message"] or "MASTER_ADDR" in f["message"]
    ]

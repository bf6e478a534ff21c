"""The pieces of a multi-node run that need no second node: what the nodes must agree on, how a disagreement
reads, and the torchrun commands for launches and exchanges across the nodes."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from ds_doctor.cluster.exchange import SECRET_ENV, Refused, exchange_command, job_secret
from ds_doctor.cluster.nodes import Cluster, ClusterError
from ds_doctor.cluster.route import facing
from ds_doctor.probe.rankoptions import DEFAULTS
from ds_doctor.reports.model import Report
from ds_doctor.run.command import rank_environment, torchrun_command
from ds_doctor.run.multinode import disagreement, malformed, plan_hash
from ds_doctor.run.pipeline import RunOptions, make_plan
from ds_doctor.run.plan import Hardware

CLUSTER = Cluster(nnodes=2, node_rank=1, host="10.0.0.1", port=29400, rdzv_id="job7", join_timeout_s=120)


def said(version: str = "0.1.0", plan: str = "abc") -> dict[str, str]:
    return {"host": "gpu-b", "version": version, "plan_hash": plan}


def test_the_plan_hash_follows_what_must_agree() -> None:
    def digest(**options: object) -> str:
        run_options = RunOptions(cluster=CLUSTER, **options)  # type: ignore[arg-type]
        return plan_hash(run_options, make_plan(run_options, Hardware("cpu", 0)))

    assert digest(level=2) == digest(level=2)
    assert (
        len({digest(level=2), digest(level=1), digest(level=2, keyword="comm"), digest(level=2, nproc=1)})
        == 4
    )
    plan = make_plan(RunOptions(cluster=CLUSTER, keyword="comm and all_reduce"), Hardware("cpu", 0))
    assert [(g.name, [c.id for c in g.cases]) for g in plan.groups if g.nodes > 1] == [
        ("ws4-n2", ["comm[all_reduce-ws4-n2]", "comm[all_reduce-bf16-ws4-n2]"])
    ]


def test_a_disagreement_names_the_node_and_what_differs() -> None:
    assert disagreement({0: said(), 1: said()}) is None
    line = disagreement({0: said(), 1: said(version="0.2.0", plan="def")})
    assert line == (
        "the nodes disagree on what to run: node 1 (gpu-b): ds-doctor 0.2.0 (node 0 has 0.1.0), plan def "
        "(node 0 has abc: other -k, --level, --nproc or --timeout?)"
    )


def answer(**fields: object) -> dict[str, object]:
    return {
        "node": 1,
        "host": "gpu-b",
        "version": "0.1.0",
        "plan_hash": "abc",
        "env": {},
        "hardware": {},
        **fields,
    }


def test_a_handshake_answer_without_its_fields_is_one_line_naming_the_node() -> None:
    """Was `KeyError: 'version'`, exit 3: whatever answers for a node (another build, a rogue process at the port)
    is checked field by field before anything of it is read."""
    assert malformed({1: answer()}) is None
    line = malformed({0: {**answer(), "node": 0}, 1: {k: v for k, v in answer().items() if k != "version"}})
    assert line == "a node's handshake answer is not ds-doctor's: node 1: version missing"
    line = malformed({1: answer(version=7, env=[]), 2: "hi", 3: Refused("it fails the job secret check (X)")})
    assert line == (
        "a node's handshake answer is not ds-doctor's: node 1: version is int, not str, env is list, not dict; "
        "node 2: the answer is str, not an object; node 3: it fails the job secret check (X)"
    )
    assert (
        malformed({1: answer(node=True)})
        == "a node's handshake answer is not ds-doctor's: node 1: node is bool, not int"
    )
    assert (
        malformed({1: answer(node=0)})
        == "a node's handshake answer is not ds-doctor's: node 1: it says it is node 0"
    )


def test_a_job_secret_file_others_can_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("k" * 40 + "\n")
    path.chmod(0o600)
    assert job_secret({SECRET_ENV: str(path)}) == b"k" * 40 and job_secret({}) is None
    path.chmod(0o644)
    with pytest.raises(
        ClusterError, match=r"readable or writable by others \(mode -rw-r--r--, uid 0\): chmod 600"
    ):
        job_secret({SECRET_ENV: str(path)})
    path.chmod(0o600)
    path.write_text("short")
    with pytest.raises(ClusterError, match="a job secret is 16 to 4096 bytes"):
        job_secret({SECRET_ENV: str(path)})
    (tmp_path / "link").symlink_to(path)
    with pytest.raises(ClusterError, match="link"):
        job_secret({SECRET_ENV: str(tmp_path / "link")})


def test_launches_across_the_nodes_use_torchruns_static_rendezvous(tmp_path: Path) -> None:
    plan = make_plan(RunOptions(cluster=CLUSTER, keyword="comm and all_reduce"), Hardware("cpu", 0))
    (inside, across) = [g for g in plan.groups if g.world_size == 2], [g for g in plan.groups if g.nodes > 1]
    local = torchrun_command(inside[0], tmp_path, CLUSTER)
    assert "--nnodes=1" in local and "--master-addr=127.0.0.1" in local  # inside a node: private, on loopback
    command = " ".join(torchrun_command(across[0], tmp_path, CLUSTER, attempt=0))
    for part in (
        "--nnodes=2",
        "--nproc-per-node=2",
        "--rdzv-backend=static",  # not c10d: its agents unpickle the rendezvous state from the store
        "--rdzv-endpoint=10.0.0.1:29400",
        "--node-rank=1",
        "--rdzv-id=job7-ws4-n2-0",
        "--rdzv-conf=timeout=120",
    ):
        assert part in command, part
    assert "c10d" not in command
    exchange = " ".join(exchange_command(CLUSTER, tmp_path, "closing", 30))
    assert (
        "torch.distributed.run" not in exchange
    )  # no torchrun: node 0's store, for the length of the exchange
    for part in ("--host 10.0.0.1", "--port 29400", "--node 1", "--nnodes 2", "--exchange-id job7-closing"):
        assert part in exchange, part


def test_sockets_stay_on_loopback_unless_a_launch_spans_real_hosts() -> None:
    assert "GLOO_SOCKET_IFNAME" in rank_environment(DEFAULTS)
    # the cases inside a node
    assert "GLOO_SOCKET_IFNAME" in rank_environment(DEFAULTS, CLUSTER, across=False)
    env = rank_environment(DEFAULTS, CLUSTER, across=True)
    where = facing(CLUSTER.host, CLUSTER.port)  # the user's choice, else the interface facing the rendezvous
    assert env.get("GLOO_SOCKET_IFNAME") == os.environ.get("GLOO_SOCKET_IFNAME") or (
        where and where.interface
    )


def test_the_report_is_written_by_node_0_or_the_lowest_node_left() -> None:
    from ds_doctor.run.multinode import cluster_result, report_writer
    from tests.reports.samples import a_report

    def report(gone: list[int]) -> Report:
        built = a_report([cluster_result(n, f"node {n} is gone") for n in gone])
        return dataclasses.replace(built, nodes=tuple({"node": n, "host": f"h{n}"} for n in range(3)))

    assert report_writer(report([])) == 0
    assert report_writer(report([0])) == 1
    assert report_writer(report([0, 1])) == 2

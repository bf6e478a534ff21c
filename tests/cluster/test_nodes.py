"""Node options in torchrun's words and Slurm's variables, with the host-list forms `scontrol show hostnames`
expands."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ds_doctor.cluster.nodes import (
    Cluster,
    ClusterError,
    expand_hostlist,
    from_options,
    from_slurm,
    parse_endpoint,
    scontrol_hostnames,
)


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node1", ["node1"]),
        ("node1,node2", ["node1", "node2"]),
        ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[01-03,07],login1", ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]),
        ("nid0[0098-0101]", ["nid00098", "nid00099", "nid00100", "nid00101"]),
        ("a[8-11]", ["a8", "a9", "a10", "a11"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("dgx-a100-[5,9]-ib", ["dgx-a100-5-ib", "dgx-a100-9-ib"]),
        ("10.0.0.[1-2]", ["10.0.0.1", "10.0.0.2"]),
    ],
)
def test_slurm_host_lists_expand_as_scontrol_does(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["gpu[01-03", "gpu]1[", "gpu[a-b]", "gpu[1-]x"])
def test_a_broken_host_list_is_refused(text: str) -> None:
    with pytest.raises(ClusterError):
        expand_hostlist(text)


def test_srun_gives_nodes_rank_endpoint_and_id() -> None:
    environ = {
        "SLURM_NNODES": "4",
        "SLURM_NODEID": "2",
        "SLURM_JOB_NODELIST": "gpu[017-018,020],gpu100",
        "SLURM_JOB_ID": "81234",
    }
    cluster = from_slurm(environ)
    assert cluster == Cluster(nnodes=4, node_rank=2, host="gpu017", port=29400, rdzv_id="slurm-81234")
    assert cluster.launch_id("consistency") == "slurm-81234-consistency"
    assert from_slurm({**environ, "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": "gpu017"}) is None  # one node
    assert from_slurm({}) is None
    with pytest.raises(ClusterError, match="names 4 hosts, SLURM_NNODES says 3"):
        from_slurm({**environ, "SLURM_NNODES": "3"})


def test_under_srun_in_a_larger_allocation_the_steps_nodes_count() -> None:
    """What srun sets for `srun -N2 -r1` in a 3-node allocation (seen on the cluster of tests/cluster/test_slurm.py):
    SLURM_NNODES and SLURM_NODEID are the step's, SLURM_JOB_NODELIST stays the job's, whose first host is not in the
    step. (It was read as a mismatch, exit 2; and the endpoint would have been a host outside the step.)"""
    environ = {
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "n[1-3]",
        "SLURM_NODEID": "1",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_STEP_NODELIST": "n[2-3]",
        "SLURM_JOB_ID": "9",
    }
    assert from_slurm(environ) == Cluster(nnodes=2, node_rank=1, host="n2", port=29400, rdzv_id="slurm-9")
    # an sbatch script: the job's
    batch = {k: v for k, v in environ.items() if not k.startswith("SLURM_STEP_")}
    assert from_slurm({**batch, "SLURM_NNODES": "3", "SLURM_NODEID": "0"}).host == "n1"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "text", ["gpu[01-03,07],login1", "nid0[0098-0101]", "rack[1-2]-n[1-2]", "10.0.0.[1-2]", "x[1-3]y[1-2],z"]
)
def test_the_expansion_agrees_with_scontrol_show_hostnames(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slurm's own expansion, where scontrol is installed (Debian's slurm-client): it needs a configuration only
    to start, not a controller."""
    if shutil.which("scontrol") is None:
        pytest.skip("scontrol not installed (Debian: apt-get install slurm-client)")
    (tmp_path / "slurm.conf").write_text("ClusterName=dsdr\nSlurmctldHost=localhost\n")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    hosts = expand_hostlist(text)
    assert scontrol_hostnames(text, len(hosts)) == hosts
    assert scontrol_hostnames(text, len(hosts) + 1) is None  # a count that disagrees: ds-doctor's own is kept


def test_options_in_torchruns_words_win_over_slurm() -> None:
    slurm = {"SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "a[1-2]", "SLURM_JOB_ID": "7"}
    given = from_options(2, 0, "127.0.0.1:29555", "my-run", 60.0, slurm)
    assert (given.node_rank, given.endpoint, given.rdzv_id, given.join_timeout_s) == (
        0,
        "127.0.0.1:29555",
        "my-run",
        60.0,
    )
    assert from_options(None, None, None, None, 60.0, slurm).endpoint == "a1:29400"
    assert from_options(None, None, None, None, 60.0, {}) is None
    assert from_options(1, 0, "h:1", None, 60.0, {}) is None  # one node is a single-node run
    with pytest.raises(ClusterError, match="together"):
        from_options(2, None, "h:1", None, 60.0, {})
    with pytest.raises(ClusterError, match=r"--node-rank 2 is not in 0\.\.1"):
        from_options(2, 2, "h:1", None, 60.0, {})


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("h:1234", ("h", 1234)),
        ("h", ("h", 29400)),
        ("[fe80::1]:99", ("fe80::1", 99)),
        ("10.1.2.3:5", ("10.1.2.3", 5)),
    ],
)
def test_endpoints(text: str, parsed: tuple[str, int]) -> None:
    assert parse_endpoint(text) == parsed


@pytest.mark.parametrize("text", ["h:", "h:port", "h:1:2", ""])
def test_a_bad_endpoint_is_refused(text: str) -> None:
    with pytest.raises(ClusterError):
        parse_endpoint(text)

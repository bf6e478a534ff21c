"""What a launch runs, and in which environment: torchrun's command (a private master port inside a node, the static
rendezvous across nodes) and the ranks' environment, built in one place from the run's options."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from ds_doctor.cluster.nodes import Cluster
from ds_doctor.cluster.route import facing
from ds_doctor.forensics.flight import BUFFER_ENTRIES
from ds_doctor.ops import interpreter_first
from ds_doctor.probe.rankoptions import RankOptions
from ds_doctor.procs import module_command
from ds_doctor.releases.overlay import prepended
from ds_doctor.run.cpufacts import CPUINFO_ENV, ask
from ds_doctor.run.plan import LaunchGroup
from ds_doctor.rundir import RunDir

_GIVEN: set[int] = set()  # the ports this process handed out: two launches started at once never share one


def free_port() -> int:
    """A free port on loopback, never one this process handed out before (the kernel may offer a just-closed port
    again, and two launches that start together would then meet at one master port)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


def loopback_interfaces() -> dict[str, str]:
    """Pin gloo's and NCCL's sockets to the loopback interface: a single-node run (or a cluster whose rendezvous is
    on loopback, as in the tests) talks to nobody else."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address.startswith("127.") for a in addresses):
            return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name}
    return {}


def rendezvous_args(group: LaunchGroup, cluster: Cluster | None, attempt: int) -> list[str]:
    """Inside one node: a private master port on loopback. Across nodes: torchrun's static rendezvous at the run's
    endpoint, hosted by node 0 (every node came in the handshake, so each node's rank is known), one rendezvous id
    per launch (the same on every node). Not the dynamic c10d rendezvous: its agents unpickle its state from the
    store, which anyone who reaches the port can write (docs/cluster.md)."""
    if group.nodes == 1 or cluster is None:
        return [
            "--nnodes=1",
            f"--nproc-per-node={group.world_size}",
            "--master-addr=127.0.0.1",
            f"--master-port={free_port()}",
        ]
    return [
        f"--nnodes={group.nodes}",
        f"--nproc-per-node={group.world_size // group.nodes}",
        "--rdzv-backend=static",
        f"--rdzv-endpoint={cluster.endpoint}",
        f"--node-rank={cluster.node_rank}",
        f"--rdzv-id={cluster.launch_id(f'{group.name}-{attempt}')}",
        f"--rdzv-conf=timeout={max(int(cluster.join_timeout_s), 60)}",
    ]


def torchrun_command(
    group: LaunchGroup,
    launch_dir: Path,
    cluster: Cluster | None = None,
    attempt: int = 0,
    takes_turns: bool = False,
) -> list[str]:
    return [
        *module_command("torch.distributed.run"),
        *rendezvous_args(group, cluster, attempt),
        "--max-restarts=0",
        "--monitor-interval=0.1",  # a launch's end seen within 0.1 s of its ranks'
        "--no-python",
        *module_command("ds_doctor.run.worker"),
        "--launch-dir",
        str(launch_dir.resolve()),
        "--backend",
        group.rank_backend,
        *(["--shared-gpu", group.share_mode] if group.shared_gpu else []),
        *(["--takes-turns"] if takes_turns else []),
    ]


def rank_environment(
    options: RankOptions, cluster: Cluster | None = None, across: bool = False, launch_dir: Path | None = None
) -> dict[str, str]:
    """The ranks' environment, built here alone from this process's and the run's `options` (the parent never
    assigns to its own `os.environ`): sockets on loopback unless the launch spans nodes whose rendezvous is
    elsewhere; the overlay first on the path with its own extensions folder; the collective record on."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if (
        not across
        or cluster is None
        or cluster.host.startswith("127.")
        or cluster.host in ("localhost", "::1")
    ):
        env.update(loopback_interfaces())
    elif (
        "GLOO_SOCKET_IFNAME" not in env and (where := facing(cluster.host, cluster.port)) and where.interface
    ):
        # gloo binds where the host name resolves (loopback on many nodes): the interface facing the rendezvous
        # instead, marked as ds-doctor's choice so that consistency compares only what the user set
        env.update(GLOO_SOCKET_IFNAME=where.interface, DS_DOCTOR_CHOSE_GLOO_SOCKET_IFNAME="1")
    if options.overlay is not None:  # a release's modules first; its ops never overwrite the installed one's
        env["PYTHONPATH"] = prepended(Path(options.overlay))
    if options.extensions_dir is not None:
        env["TORCH_EXTENSIONS_DIR"] = options.extensions_dir
    env.setdefault("OMP_NUM_THREADS", "1")
    # the Flight Recorder on (gloo too, since torch 2.8), so a hung case's collectives can be lined up across ranks
    # (the worker sets the older TORCH_NCCL_TRACE_BUFFER_SIZE itself where its torch predates this name)
    env.setdefault("TORCH_FR_BUFFER_SIZE", env.get("TORCH_NCCL_TRACE_BUFFER_SIZE", str(BUFFER_ENTRIES)))
    env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    if launch_dir is not None:  # NCCL's own watchdog, on its own (longer) timeout, dumps where ours does
        env.setdefault("TORCH_FR_DUMP_TEMP_FILE", str(launch_dir / "forensics" / "nccl-watchdog" / "rank_"))
        if (facts := _run_cpu_facts(launch_dir)) is not None:
            env[CPUINFO_ENV] = str(facts)
    env["PATH"] = interpreter_first(
        env.get("PATH")
    )  # the ninja that built the ops (another one rebuilds them)
    return env


def _run_cpu_facts(launch_dir: Path) -> Path | None:
    """Where py-cpuinfo's answer for the run the launch belongs to (its root holds the manifest) is, or will be."""
    root = next((p for p in (launch_dir, *launch_dir.parents) if (p / RunDir.MANIFEST).is_file()), None)
    return ask(root) if root is not None else None

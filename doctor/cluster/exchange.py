"""What the nodes of a run tell each other, through one torchrun launch of one rank per node: each rank puts its
node's payload (JSON) into torchrun's rendezvous store and reads every other node's back. ds-doctor adds no
protocol of its own: the rendezvous (c10d, at the run's endpoint) and its store are torchrun's.

The rendezvous is elastic (`--nnodes 1:N`, last call = the wait allowed): every node that joins in time takes
part, so a node that never comes is named rather than waited for forever.

    parent: exchange(cluster, run_dir, "handshake", payload, wait_s) -> {node rank: payload}
    rank:   python -m ds_doctor.cluster.exchange --exchange-dir LAUNCH_DIR --this-node R --wait-s S
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ds_doctor.cluster.nodes import Cluster
from ds_doctor.cluster.route import rendezvous_options
from ds_doctor.files import write_atomic
from ds_doctor.procs import die_with_parent, kill_tree, module_command
from ds_doctor.redact import scrub_text
from ds_doctor.rundir import RunDir

PAYLOAD = "payload.json"
EXCHANGED = "exchanged.json"
START_S = 120.0  # torchrun's start and the ranks' imports, on top of the wait


class ExchangeError(RuntimeError):
    """The exchange did not happen at all (torchrun could not start, or no rank wrote what it read)."""


def exchange_command(cluster: Cluster, launch_dir: Path, name: str, wait_s: float) -> list[str]:
    wait = int(wait_s)
    local, is_host = rendezvous_options(cluster.host, cluster.port)
    return [
        *module_command("torch.distributed.run"),
        f"--nnodes=1:{cluster.nnodes}",
        "--nproc-per-node=1",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={cluster.endpoint}",
        f"--rdzv-id={cluster.launch_id(name)}",
        f"--rdzv-conf=join_timeout={wait + 30},last_call_timeout={wait},read_timeout={max(wait, 60)}{is_host}",
        *local,
        "--max-restarts=0",
        "--monitor-interval=0.5",
        # (names torchrun's parser does not take for abbreviations of its own: --node would match --node-rank)
        "--no-python",
        *module_command("ds_doctor.cluster.exchange"),
        "--exchange-dir",
        str(launch_dir.resolve()),
        "--this-node",
        str(cluster.node_rank),
        "--wait-s",
        str(wait),
    ]


def exchange(
    cluster: Cluster, run_dir: RunDir, name: str, payload: Any, wait_s: float, env: dict[str, str]
) -> dict[int, Any]:
    """Every node's payload by node rank; the nodes that did not join within `wait_s` are simply absent."""
    launch = run_dir.launch(f"exchange-{name}", "cpu", 0)
    launch.path.mkdir(parents=True, exist_ok=True)
    write_atomic(launch.path / PAYLOAD, json.dumps(payload, default=str))
    command = exchange_command(cluster, launch.path, name, wait_s)
    launch.command.write_text(scrub_text(" ".join(command)) + "\n")
    with launch.torchrun_log.open("wb") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        try:
            proc.wait(timeout=wait_s + START_S)
        except subprocess.TimeoutExpired:
            kill_tree(proc)
    try:
        return {int(node): data for node, data in json.loads((launch.path / EXCHANGED).read_text()).items()}
    except (FileNotFoundError, ValueError) as exc:
        raise ExchangeError(
            f"the {name} exchange at the rendezvous {cluster.endpoint} did not happen within "
            f"{wait_s:.0f} s (nothing answered there, or torchrun could not start: exit code "
            f"{proc.returncode}; see {launch.torchrun_log})"
        ) from exc


def rendezvous_store(wait_s: float) -> Any:
    """This launch's part of torchrun's rendezvous store, for a rank: a client of the agents' store at
    MASTER_ADDR:MASTER_PORT, under a prefix of the launch's rendezvous id."""
    import torch.distributed as dist

    base = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        is_master=False,
        timeout=dt.timedelta(seconds=wait_s + 60),
    )
    return dist.PrefixStore(f"ds-doctor/{os.environ.get('TORCHELASTIC_RUN_ID', 'run')}/", base)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="ds-doctor node exchange (started by torchrun, one rank per node)"
    )
    parser.add_argument("--exchange-dir", dest="dir", required=True, type=Path)
    parser.add_argument("--this-node", dest="node", required=True, type=int)
    parser.add_argument("--wait-s", dest="wait", required=True, type=float)
    args = parser.parse_args(argv)
    die_with_parent()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = rendezvous_store(args.wait)
    store.set(
        f"payload/{rank}",
        json.dumps({"node": args.node, "payload": json.loads((args.dir / PAYLOAD).read_text())}),
    )
    store.wait([f"payload/{r}" for r in range(world)])
    received = [json.loads(store.get(f"payload/{r}")) for r in range(world)]
    write_atomic(args.dir / EXCHANGED, json.dumps({str(item["node"]): item["payload"] for item in received}))
    # the store lives in a rank's agent: nobody leaves before everyone has read
    store.set(f"done/{rank}", "1")
    store.wait([f"done/{r}" for r in range(world)])
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the nodes of a run tell each other: each node's payload (JSON) through a TCP store that node 0 hosts at the
run's endpoint for the length of one exchange, in a child process of each node's ds-doctor (its log, torch's own
warnings included, in the launch directory; the parent reads what it wrote).

    parent: exchange(cluster, run_dir, "handshake", payload, wait_s) -> {node rank: payload}
    child:  python -m ds_doctor.cluster.exchange --exchange-dir DIR --host H --port P --node R --nnodes N ...

Node 0 waits `wait_s` for the others' payloads, then writes the roster of the nodes that came: a node that never
comes is named rather than waited for. Every node reads the roster's payloads, says it has read them, and node 0
closes the store once all have (the others wait for that close before they go on, so no later launch meets this
store at the endpoint's port).

What a node trusts (docs/cluster.md): nothing read from the store is unpickled (torchrun's dynamic c10d rendezvous
unpickles its state from this same kind of store: ds-doctor does not use it); each answer is JSON whose fields the
caller checks by name and type before it uses any; and with a job secret (`DS_DOCTOR_JOB_SECRET_FILE`, a file only
its owner can read, the same on every node) each answer carries an HMAC-SHA256 over the exchange, the node and the
payload, checked before anything in it is read. torch's store listens on every interface and has no authentication:
without a secret, a process that reaches the port during an exchange can answer for a node (not run code).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import hmac
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ds_doctor.cluster.nodes import Cluster, ClusterError
from ds_doctor.files import write_atomic
from ds_doctor.procs import die_with_parent, kill_tree, module_command
from ds_doctor.rundir import RunDir

PAYLOAD = "payload.json"
EXCHANGED = "exchanged.json"
#: on top of the wait: the child's start (it imports torch), a node 0 that comes late, the close
START_S = 120.0
SECRET_ENV = "DS_DOCTOR_JOB_SECRET_FILE"
SECRET_BYTES = (16, 4096)  # a job secret's size, at least and at most


class ExchangeError(RuntimeError):
    """The exchange did not happen at all (nothing answered at the endpoint, or the child could not start)."""


def job_secret(environ: Mapping[str, str] = os.environ) -> bytes | None:
    """The job secret the nodes share, from the file `DS_DOCTOR_JOB_SECRET_FILE` names; None where none is named. A
    file others can read (or one that is not a regular file of this user's) is refused in one line (exit 2)."""
    name = environ.get(SECRET_ENV)
    if not name:
        return None
    path = Path(name).expanduser()
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ClusterError(f"{SECRET_ENV}={name}: {exc.strerror or exc}") from None
    with open(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ClusterError(f"{SECRET_ENV}={name}: not a regular file")
        if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ClusterError(
                f"{SECRET_ENV}={name}: readable or writable by others (mode {stat.filemode(info.st_mode)}, "
                f"uid {info.st_uid}): chmod 600, as its owner"
            )
        secret = handle.read(SECRET_BYTES[1] + 1).strip()
    if not SECRET_BYTES[0] <= len(secret) <= SECRET_BYTES[1]:
        raise ClusterError(
            f"{SECRET_ENV}={name}: a job secret is {SECRET_BYTES[0]} to {SECRET_BYTES[1]} bytes "
            f"(head -c 32 /dev/urandom | base64 > FILE), not {len(secret)}"
        )
    return secret


def seal(secret: bytes | None, exchange_id: str, node: int, body: str) -> str | None:
    """The HMAC-SHA256 of one node's answer in one exchange; None without a secret."""
    if secret is None:
        return None
    return hmac.new(secret, f"{exchange_id}\n{node}\n{body}".encode(), hashlib.sha256).hexdigest()


def opened(raw: bytes, node: int, exchange_id: str, secret: bytes | None) -> tuple[Any, str | None]:
    """(the payload, None) of one node's raw answer, or (None, why it is not one): JSON of {"node", "body", "mac"}
    whose node is the one asked, whose mac is the secret's over the body, and whose body is JSON."""
    try:
        answer = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None, "not JSON"
    if not isinstance(answer, dict) or not isinstance(answer.get("body"), str) or answer.get("node") != node:
        return None, "not a ds-doctor answer (fields node and body)"
    if secret is not None:
        mac, want = answer.get("mac"), seal(secret, exchange_id, node, answer["body"])
        if not isinstance(mac, str) or want is None or not hmac.compare_digest(mac, want):
            return None, f"it fails the job secret check ({SECRET_ENV})"
    try:
        return json.loads(answer["body"]), None
    except ValueError:
        return None, "its body is not JSON"


def exchange_command(cluster: Cluster, launch_dir: Path, name: str, wait_s: float) -> list[str]:
    return [
        *module_command("ds_doctor.cluster.exchange"),
        "--exchange-dir",
        str(launch_dir.resolve()),
        "--host",
        cluster.host,
        "--port",
        str(cluster.port),
        "--node",
        str(cluster.node_rank),
        "--nnodes",
        str(cluster.nnodes),
        "--exchange-id",
        cluster.launch_id(name),
        "--wait-s",
        str(int(wait_s)),
    ]


def exchange(cluster: Cluster, run_dir: RunDir, name: str, payload: Any, wait_s: float) -> dict[int, Any]:
    """Every node's payload by node rank; the nodes that did not join within `wait_s` are absent. An answer that is not
    one (bad JSON, a failed secret check) is a `Refused` in place of its payload: the caller names the node."""
    secret = job_secret()
    launch = run_dir.launch(f"exchange-{name}", "cpu", 0)
    launch.path.mkdir(parents=True, exist_ok=True)
    write_atomic(launch.path / PAYLOAD, json.dumps(payload, default=str))
    command = exchange_command(cluster, launch.path, name, wait_s)
    write_atomic(launch.command, " ".join(command) + "\n")
    with launch.torchrun_log.open("wb") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )
        try:
            proc.wait(timeout=wait_s + START_S)
        except subprocess.TimeoutExpired:
            kill_tree(proc)
    try:
        said = json.loads((launch.path / EXCHANGED).read_text())
    except (FileNotFoundError, ValueError) as exc:
        raise ExchangeError(
            f"the {name} exchange at {cluster.endpoint} did not happen within {wait_s:.0f} s (nothing answered "
            f"there, or node 0 closed it before this node came: exit code {proc.returncode}; see "
            f"{launch.torchrun_log})"
        ) from exc
    nodes: dict[int, Any] = {}
    for node, raw in said.items():
        body, why = opened(raw.encode(), int(node), cluster.launch_id(name), secret)
        nodes[int(node)] = Refused(why) if why is not None else body
    return nodes


class Refused:
    """A node's answer that is not one, and why."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"Refused({self.why!r})"


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


def _roster(store: Any, args: argparse.Namespace, secret: bytes | None) -> list[int]:
    """Node 0: the nodes whose answers came within the wait, written (sealed like an answer) for the others; the
    others: what node 0 wrote, checked like an answer."""
    roster_id = f"{args.exchange_id}/roster"
    if args.node == 0:
        deadline = time.monotonic() + args.wait
        keys = [f"said/{n}" for n in range(args.nnodes)]
        while not store.check(keys) and time.monotonic() < deadline:
            time.sleep(0.2)
        came = [n for n in range(args.nnodes) if store.check([f"said/{n}"])]
        body = json.dumps(came)
        store.set("roster", json.dumps({"node": 0, "body": body, "mac": seal(secret, roster_id, 0, body)}))
        return came
    store.wait(["roster"])
    came, why = opened(store.get("roster"), 0, roster_id, secret)
    if why is not None or not isinstance(came, list):
        raise ExchangeError(f"the roster at the endpoint is not node 0's: {why or 'not a list'}")
    if not all(isinstance(n, int) and 0 <= n < args.nnodes for n in came):
        raise ExchangeError("the roster at the endpoint is not node 0's: not a list of node ranks")
    return came


def main(argv: list[str] | None = None) -> int:
    import torch.distributed as dist

    parser = argparse.ArgumentParser(description="ds-doctor node exchange (one process per node)")
    parser.add_argument("--exchange-dir", dest="dir", required=True, type=Path)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", required=True, type=int)
    parser.add_argument("--node", required=True, type=int)
    parser.add_argument("--nnodes", required=True, type=int)
    parser.add_argument("--exchange-id", dest="exchange_id", required=True)
    parser.add_argument("--wait-s", dest="wait", required=True, type=float)
    args = parser.parse_args(argv)
    die_with_parent()
    secret = job_secret()
    timeout = dt.timedelta(seconds=args.wait + START_S / 2)
    host = args.node == 0
    base = dist.TCPStore(args.host, args.port, is_master=host, wait_for_workers=False, timeout=timeout)
    store = dist.PrefixStore(f"ds-doctor/{args.exchange_id}", base)  # keys: ds-doctor/ID/said/N
    body = (args.dir / PAYLOAD).read_text()
    mine = {"node": args.node, "body": body, "mac": seal(secret, args.exchange_id, args.node, body)}
    store.set(f"said/{args.node}", json.dumps(mine))
    came = _roster(store, args, secret)
    said = {str(n): store.get(f"said/{n}").decode("utf-8", "replace") for n in came}
    write_atomic(args.dir / EXCHANGED, json.dumps(said))
    store.set(f"read/{args.node}", "1")
    if host:  # the store lives in this process: it closes when every node has read (or the wait is over)
        deadline = time.monotonic() + args.wait
        while not store.check([f"read/{n}" for n in came]) and time.monotonic() < deadline:
            time.sleep(0.1)
        return 0
    try:  # until node 0 closes its store: a launch after this one must not meet it at the endpoint's port
        store.wait(["closed"])
    except Exception:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

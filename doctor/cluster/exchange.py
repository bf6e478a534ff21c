"""What the nodes of a run tell each other: each node's payload (JSON) through a TCP store that node 0 hosts at the
run's endpoint for the length of one exchange, in a child process of each node's ds-doctor (its log, torch's own
warnings included, in the launch directory; the parent reads what it wrote).

    parent: exchange(cluster, run_dir, "handshake", payload, wait_s) -> {node rank: payload}
    child:  python -m ds_doctor.cluster.exchange --exchange-dir DIR --host H --port P --node R --nnodes N ...

Node 0 opens the store, puts a fresh random nonce in it (this run's), and waits `wait_s` for the others' answers,
then writes the roster of the nodes that came: a node that never comes is named rather than waited for. An answer at
a node's key that is not the node's own for this run (with a job secret: not sealed for this nonce) is passed over,
noted and deleted, and the wait for the node's own goes on: a process that answers first cannot shut a node out.
Each other node waits `wait_s` for node 0's store and its nonce (a node that gets no answer in that time says so
and stops), answers (again wherever its key is found empty), and waits `wait_s` + ROSTER_SLACK_S for the roster,
then reads the roster's payloads. Every node says it has read them, and node 0 closes the store once all
have (the others wait for that close before they go on, so no later launch meets this store at the endpoint's port).

What a node trusts (docs/cluster.md): nothing read from the store is unpickled (torchrun's dynamic c10d rendezvous
unpickles its state from this same kind of store: ds-doctor does not use it); each answer is at most
MAX_ANSWER_BYTES of JSON whose fields the caller checks by name and type before it uses any, parsed with a depth
bound; and with a job secret (`DS_DOCTOR_JOB_SECRET_FILE`, a file only its owner can read, the same on every node)
each answer carries an HMAC-SHA256 over the exchange, the node, node 0's nonce and the payload's raw text, checked
before the payload is parsed. The nonce binds an answer to its run: one sealed in an earlier run of the same job id
(the same exchange id) is refused. The roster is sealed the same way and names the nonce each node drew for itself,
so a node knows the roster (and so node 0's nonce) is of this run, not an earlier one replayed. torch's store
listens on every interface and has no authentication: without a secret, a process that reaches the port during an
exchange can answer for a node (not run code).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from ds_doctor.cluster.nodes import Cluster, ClusterError
from ds_doctor.files import replacing, write_atomic
from ds_doctor.procs import die_with_parent, kill_tree, module_command
from ds_doctor.reports.safe import clip
from ds_doctor.rundir import LaunchDir, RunDir, read_own
from ds_doctor.userinput import MAX_DEPTH, MiB, parse_json

PAYLOAD = "payload.json"
EXCHANGED = "exchanged.json"
#: the child's one line where it ended without a record: no answer from node 0 within the wait, a roster not its own
UNANSWERED = "unanswered.txt"
#: on top of the wait: the child's start (it imports torch), a node 0 that comes late, the close
START_S = 120.0
SECRET_ENV = "DS_DOCTOR_JOB_SECRET_FILE"
SECRET_BYTES = (16, 4096)  # a job secret's size, at least and at most
#: One node's answer, envelope included, is read up to this size; a larger one is refused unparsed. A handshake
#: answer is a few KiB; a closing answer is the node's own results, its share of a report (read up to 64 MiB).
MAX_ANSWER_BYTES = 16 * MiB
#: An answer's envelope is one flat object of strings and numbers: two levels, counting the object itself.
ENVELOPE_DEPTH = 2
NONCE = re.compile(r"[0-9a-f]{32}")  # secrets.token_hex(16): node 0's per run, and each node's own
#: How often node 0 looks at the answers' keys, and a node at its own key and the roster's, while they wait
POLL_S = 0.2
#: On top of the wait, for a node's roster: node 0 writes it within its wait of drawing the nonce, which was before
#: the node read the nonce; this covers node 0's last look at the keys and the roster's write.
ROSTER_SLACK_S = 5.0
#: Why `opened` refuses an answer whose seal does not check
FAILED_SEAL = f"it fails the job secret check ({SECRET_ENV})"


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


def seal(secret: bytes | None, exchange_id: str, node: int, body: str, *, nonce: str) -> str | None:
    """The HMAC-SHA256 of one node's answer in one exchange of one run (node 0's `nonce`); None without a secret.
    The exchange, the node and the nonce are one JSON line ahead of the body's raw text, so no two run together;
    a lone surrogate in the body (JSON's "\\ud800") is sealed as its bytes, never an error."""
    if secret is None:
        return None
    head = json.dumps([exchange_id, node, nonce]).encode()
    return hmac.new(secret, head + b"\n" + body.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def sealed(
    secret: bytes | None, exchange_id: str, node: int, body: str, *, nonce: str, mine: str | None = None
) -> str:
    """One node's answer as it goes into the store: the payload's raw text, sealed for this run's `nonce` (named
    too, so that a reader tells a replay from a forgery), with the nonce this node drew for itself (`mine`, which
    node 0's roster names back to it)."""
    mac = seal(secret, exchange_id, node, body, nonce=nonce)
    return json.dumps({"node": node, "nonce": nonce, "mine": mine, "body": body, "mac": mac})


class _Unreadable(ValueError):
    """What `parse_json` raises here; its message is the reason an answer is refused."""


def _parsed(text: str, what: str, max_depth: int) -> tuple[Any, str | None]:
    """(JSON, None) or (None, why not): parsed with `max_depth`, so a deep nesting is a reason, not a
    RecursionError."""
    try:
        return parse_json(text, what, _Unreadable, max_depth=max_depth), None
    except _Unreadable as exc:
        return None, str(exc)


def envelope(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(the fields, None) of one raw answer, or (None, why not), read within bounds before any of it is trusted: at
    most MAX_ANSWER_BYTES (larger is refused unparsed), and an object ENVELOPE_DEPTH levels deep at most. The body
    in it stays text until its seal checks."""
    if len(raw) > MAX_ANSWER_BYTES:
        return None, f"larger than {MAX_ANSWER_BYTES // MiB} MiB"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "its answer: not JSON: not UTF-8 text"
    answer, why = _parsed(text, "its answer", ENVELOPE_DEPTH)
    if why is not None:
        return None, why
    if not isinstance(answer, dict):
        return None, "not a ds-doctor answer (fields node and body)"
    return answer, None


def opened(
    raw: bytes, node: int, exchange_id: str, secret: bytes | None, *, nonce: str
) -> tuple[Any, str | None]:
    """(the payload, None) of one node's raw answer, or (None, why it is not one): the node's own answer for this
    run (`unsealed`), then a body of JSON at most MAX_DEPTH levels deep."""
    body, why = unsealed(raw, node, exchange_id, secret, nonce=nonce)
    if body is None:
        return None, why
    return _parsed(body, "its body", MAX_DEPTH)


def unsealed(
    raw: bytes, node: int, exchange_id: str, secret: bytes | None, *, nonce: str
) -> tuple[str | None, str | None]:
    """(the body's raw text, None) where `raw` is the node's own answer for this run, else (None, why not): a bounded
    envelope (`envelope`) whose node is the one asked; with a secret, a mac over the body's raw text for this
    exchange, this node and this run's `nonce`. The body is not parsed here: that waits for its seal to check."""
    answer, why = envelope(raw)
    if answer is None:
        return None, why
    body = answer.get("body")
    if type(answer.get("node")) is not int or answer["node"] != node or not isinstance(body, str):
        return None, "not a ds-doctor answer (fields node and body)"
    if secret is not None:
        mac, for_run = answer.get("mac"), answer.get("nonce")
        want = seal(secret, exchange_id, node, body, nonce=for_run) if isinstance(for_run, str) else None
        # compared as bytes: compare_digest refuses a str that is not ASCII, and the mac is the sender's to choose
        if (
            not isinstance(mac, str)
            or want is None
            or not hmac.compare_digest(mac.encode(errors="replace"), want.encode())
        ):
            return None, FAILED_SEAL
        if for_run != nonce:
            return (
                None,
                "it is sealed for another run of this job id, not this one (an earlier run's answer, replayed)",
            )
    return body, None


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


def write_private(path: Path, text: str) -> None:
    """`text` written atomically to `path`, readable by its owner only whatever the umask (the mode is set before
    the first byte): the exchange's files hold every node's environment and sealed answers."""
    with replacing(path) as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)


def exchange(cluster: Cluster, run_dir: RunDir, name: str, payload: Any, wait_s: float) -> dict[int, Any]:
    """Every node's payload by node rank; the nodes that did not join within `wait_s` are absent. An answer that is not
    one (bad JSON, a failed secret check, one sealed for an earlier run) is a `Refused` in place of its payload: the
    caller names the node."""
    secret = job_secret()
    launch = run_dir.launch(f"exchange-{name}", "cpu", 0)
    launch.path.mkdir(parents=True, exist_ok=True)
    write_private(launch.path / PAYLOAD, json.dumps(payload, default=str))
    command = exchange_command(cluster, launch.path, name, wait_s)
    write_atomic(launch.command, " ".join(command) + "\n")
    started = time.monotonic()
    stopped = False
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
            stopped = True
    record = _read_record(launch.path / EXCHANGED)
    if record is None:
        raise ExchangeError(
            _no_record(cluster, name, launch, proc.returncode, time.monotonic() - started, stopped)
        )
    nonce, said, passed_over = record
    nodes: dict[int, Any] = {node: Refused(why) for node, why in passed_over.items()}
    for node, raw in said.items():
        body, why = opened(
            raw.encode("utf-8", "surrogatepass"), node, cluster.launch_id(name), secret, nonce=nonce
        )
        nodes[node] = Refused(why) if why is not None else body
    return nodes


def _read_record(path: Path) -> tuple[str, dict[int, str], dict[int, str]] | None:
    """(node 0's nonce, each node's raw answer, why node 0 took none for a node whose key held only answers that
    were not the node's) as the child recorded them; None where it recorded nothing."""
    try:
        record = json.loads(path.read_text())
        nonce, said = record["nonce"], {int(n): text for n, text in record["said"].items()}
        passed_over = {int(n): why for n, why in record.get("refused", {}).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    texts = [*said.values(), *passed_over.values()]
    if not isinstance(nonce, str) or not all(isinstance(text, str) for text in texts):
        return None
    return nonce, said, passed_over


def _no_record(
    cluster: Cluster, name: str, launch: LaunchDir, code: int | None, elapsed: float, stopped: bool
) -> str:
    """Why an exchange left no record, in one line: the child's own reason where it gave one, else the time the
    exchange really took."""
    reason = read_own(launch.path / UNANSWERED)
    if reason and reason.strip():
        return f"the {name} exchange: {clip(reason.strip(), 500)}; see {launch.torchrun_log}"
    if stopped:
        return (
            f"the {name} exchange at {cluster.endpoint} was stopped after {elapsed:.0f} s without an answer "
            f"(see {launch.torchrun_log})"
        )
    return (
        f"the {name} exchange at {cluster.endpoint} ended after {elapsed:.0f} s without an answer (exit code "
        f"{code}; see {launch.torchrun_log})"
    )


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


# ---- the child: one per node, for the length of one exchange --------------------------------------------------


class Watchdog:
    """Ends this process, writing why for the parent, when a wait on node 0's store outlasts its bound. torch's own
    timeout is no bound there: against an endpoint that accepts and never answers, TCPStore's constructor waits for
    the reply to its handshake past its timeout (torch 2.13: still waiting after 300 s with a 5 s timeout). It waits
    in C++ with the GIL released, so a timer thread still runs."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.timer: threading.Timer | None = None

    def arm(self, seconds: float, why: str) -> None:
        """From now, `seconds` until this process ends saying `why` (replacing any bound armed before)."""
        self.disarm()
        self.timer = threading.Timer(seconds, self._expire, args=(why,))
        self.timer.daemon = True
        self.timer.start()

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self, why: str) -> NoReturn:
        write_atomic(self.folder / UNANSWERED, why + "\n")
        os._exit(1)


def _write_record(
    folder: Path, nonce: str, said: Mapping[int, bytes], refused: Mapping[int, str] | None = None
) -> None:
    """What this node read, for the parent to check: node 0's nonce and each answer as it came, cut after
    MAX_ANSWER_BYTES + 1 bytes (still too large, so refused, and never held in full again); on node 0, why it took
    no answer for a node whose key held only answers that were not the node's."""
    texts = {str(n): raw[: MAX_ANSWER_BYTES + 1].decode("utf-8", "replace") for n, raw in said.items()}
    why = {str(n): reason for n, reason in (refused or {}).items()}
    write_private(folder / EXCHANGED, json.dumps({"nonce": nonce, "said": texts, "refused": why}))


def _own_nonce(raw: bytes) -> str | None:
    """The nonce a node drew for itself, from its answer; None where the answer carries none. Node 0's roster names
    it back to that node."""
    answer, _ = envelope(raw)
    mine = answer.get("mine") if answer is not None else None
    return mine if isinstance(mine, str) and NONCE.fullmatch(mine) else None


def _roster(raw: bytes, args: argparse.Namespace, secret: bytes | None, nonce: str, mine: str) -> list[int]:
    """The nodes node 0's roster names, checked like an answer (sealed for this run's nonce); where it names this
    node, with the nonce this node drew. A roster sealed in an earlier run and replayed with that run's nonce names
    an earlier nonce, so a node never takes an earlier run's roster (and its answers) for this one's."""
    where = f"{args.host}:{args.port}"
    roster, why = opened(raw, 0, f"{args.exchange_id}/roster", secret, nonce=nonce)
    if why is not None or not isinstance(roster, dict):
        raise ExchangeError(f"the roster at {where} is not node 0's: {why or 'not an object'}")
    if not all(
        re.fullmatch(r"\d{1,9}", key) and int(key) < args.nnodes and (value is None or isinstance(value, str))
        for key, value in roster.items()
    ):
        raise ExchangeError(f"the roster at {where} is not node 0's: not a roster of node ranks")
    if str(args.node) in roster and roster[str(args.node)] != mine:
        raise ExchangeError(_misnamed(where, args.node, roster[str(args.node)], secret))
    return sorted(int(key) for key in roster)


def _misnamed(where: str, node: int, named: str | None, secret: bytes | None) -> str:
    """Why a roster that names this node with a nonce other than the one it drew is refused, by what it names. With
    a secret, node 0 takes only answers sealed for its nonce, so a roster sealed over another nonce this node might
    have drawn is an earlier run's, replayed; no nonce at all is an answer node 0 took that no node of this version
    sent; without a secret, any process at the port can have answered in this node's place."""
    if named is None:
        return (
            f"the roster at {where} does not hold node {node}'s answer: node 0 took an answer at node {node}'s key "
            f"that names no nonce of node {node}'s (another process answered in its place)"
        )
    if secret is None:
        return (
            f"the roster at {where} does not hold node {node}'s answer: it names node {node} with a nonce other "
            f"than the one it drew (another process answered in its place, or an earlier run's roster is replayed; "
            f"{SECRET_ENV} tells them apart)"
        )
    return (
        f"the roster at {where} is not this run's: it names node {node} with a nonce other than the one it drew "
        "(an earlier run's roster, replayed)"
    )


def _gather(
    store: Any, args: argparse.Namespace, secret: bytes | None, nonce: str, own: bytes
) -> tuple[dict[int, bytes], dict[int, str]]:
    """Node 0's wait for the answers: (each node's answer, why none was taken) within the wait. A node's answer is
    the first at its key that is its own for this run (`unsealed`: with a secret, sealed for this nonce); one that is
    not (a process without the secret, an earlier run's answer) is noted in the log, deleted so that the node sees
    its key empty and answers again, and the wait goes on. A node whose key held only such answers is refused for
    the last of them; its own answer may still come after them, up to the end of the wait."""
    deadline = time.monotonic() + args.wait
    taken: dict[int, bytes] = {0: own}  # node 0's own answer as it wrote it, whatever is at its key now
    passed: dict[int, bytes] = {}
    refused: dict[int, str] = {}
    while len(taken) < args.nnodes and time.monotonic() < deadline:
        for node in range(args.nnodes):
            key = f"said/{node}"
            if node in taken or not store.check([key]):
                continue
            raw = store.get(key)
            why = refused[node] if passed.get(node) == raw else _not_its_own(raw, node, args, secret, nonce)
            if why is None:
                taken[node] = raw
                refused.pop(node, None)
                continue
            if passed.get(node) != raw:
                print(f"node 0: passed over an answer at node {node}'s key: {clip(why, 300)}", flush=True)
            passed[node], refused[node] = raw, why
            store.delete_key(key)
        time.sleep(POLL_S)
    return taken, refused


def _not_its_own(
    raw: bytes, node: int, args: argparse.Namespace, secret: bytes | None, nonce: str
) -> str | None:
    """Why the answer at `node`'s key is not that node's own for this run; None where it is. A failed seal is worded
    as what it is: an answer written at the node's key by another, not the node's."""
    _, why = unsealed(raw, node, args.exchange_id, secret, nonce=nonce)
    if why == FAILED_SEAL:
        return f"an answer at node {node}'s key failed the job secret check (not node {node}'s)"
    return why


def _await_roster(store: Any, key: str, answer: str, seconds: float) -> bool:
    """Whether node 0's roster came within `seconds`. Until it does, this node answers again wherever its key is
    empty: node 0 deletes an answer there that is not this node's (one written over this node's answer included),
    so the answer node 0 reads next is this node's."""
    deadline = time.monotonic() + seconds
    while not store.check(["roster"]):
        if time.monotonic() >= deadline:
            return False
        if not store.check([key]):
            store.set(key, answer)
        time.sleep(POLL_S)
    return True


def _host(args: argparse.Namespace, secret: bytes | None) -> None:
    """Node 0: open the store and put this run's nonce in it before anyone answers, answer, wait for the others,
    write the roster, record what came, and keep the store open until every node that came has read it (or the
    wait is over): the store lives in this process."""
    import torch.distributed as dist

    where = f"{args.host}:{args.port}"
    timeout = dt.timedelta(seconds=args.wait + START_S / 2)
    try:
        base = dist.TCPStore(args.host, args.port, is_master=True, wait_for_workers=False, timeout=timeout)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExchangeError(f"node 0 cannot host the exchange at {where}: {clip(first, 300)}") from None
    store = dist.PrefixStore(f"ds-doctor/{args.exchange_id}", base)  # keys: ds-doctor/ID/said/N
    nonce = secrets.token_hex(16)
    store.set("nonce", nonce)
    own = sealed(secret, args.exchange_id, 0, (args.dir / PAYLOAD).read_text(), nonce=nonce)
    store.set("said/0", own)
    said, refused = _gather(store, args, secret, nonce, own.encode())
    roster = json.dumps({str(n): _own_nonce(raw) for n, raw in sorted(said.items())})
    store.set("said/0", own)  # what the nodes read for node 0 is its own answer, whatever was written over it
    store.set("roster", sealed(secret, f"{args.exchange_id}/roster", 0, roster, nonce=nonce))
    _write_record(args.dir, nonce, said, refused)
    store.set("read/0", "1")
    deadline = time.monotonic() + args.wait
    while not store.check([f"read/{n}" for n in said]) and time.monotonic() < deadline:
        time.sleep(0.1)


def _join(args: argparse.Namespace, secret: bytes | None, watchdog: Watchdog) -> None:
    """Node R > 0: node 0's store and this run's nonce within the wait (else one line: no answer), this node's
    answer sealed for that nonce, then the roster and the answers it names; then the wait for node 0 to close the
    store, so that no later launch meets it at the endpoint's port."""
    import torch.distributed as dist

    where = f"{args.host}:{args.port}"
    silent = f"no answer from {where} within {args.wait:g} s (node 0's ds-doctor hosts it there)"
    started = time.monotonic()
    watchdog.arm(args.wait, silent)
    try:
        base = dist.TCPStore(
            args.host,
            args.port,
            is_master=False,
            wait_for_workers=False,
            timeout=dt.timedelta(seconds=max(args.wait, 1.0)),
        )
    except RuntimeError:  # nothing listened within the wait: torch retries a refused connection until then
        raise ExchangeError(silent) from None
    base.set_timeout(dt.timedelta(seconds=args.wait + START_S / 2))
    store = dist.PrefixStore(f"ds-doctor/{args.exchange_id}", base)
    left = max(args.wait - (time.monotonic() - started), 1.0)
    no_nonce = f"{where} answered, but no ds-doctor exchange began there within {args.wait:g} s"
    watchdog.arm(left, no_nonce)
    try:
        store.wait(["nonce"], dt.timedelta(seconds=left))
        raw_nonce = store.get("nonce")
    except RuntimeError:
        raise ExchangeError(no_nonce) from None
    nonce = raw_nonce.decode("ascii", "replace") if len(raw_nonce) == 32 else ""
    if not NONCE.fullmatch(nonce):
        raise ExchangeError(f"the run nonce at {where} is not ds-doctor's")
    mine = secrets.token_hex(16)
    body = (args.dir / PAYLOAD).read_text()
    answer = sealed(secret, args.exchange_id, args.node, body, nonce=nonce, mine=mine)
    roster_s = args.wait + ROSTER_SLACK_S
    no_roster = f"no roster from node 0 at {where} within {roster_s:g} s"
    watchdog.arm(roster_s + 5.0, no_roster)
    try:  # node 0 may have closed its store since its nonce was read: one line, not torch's C++ frames
        store.set(f"said/{args.node}", answer)
    except RuntimeError:
        raise ExchangeError(
            f"node 0 at {where} closed the exchange before this node answered (its wait of {args.wait:g} s for "
            "the nodes was over)"
        ) from None
    try:
        if not _await_roster(store, f"said/{args.node}", answer, roster_s):
            raise ExchangeError(no_roster)
        came = _roster(store.get("roster"), args, secret, nonce, mine)
        said = {n: store.get(f"said/{n}") for n in came}
    except ExchangeError:
        raise
    except RuntimeError:
        raise ExchangeError(no_roster) from None
    watchdog.disarm()
    _write_record(args.dir, nonce, said)
    store.set(f"read/{args.node}", "1")
    try:  # until node 0 closes its store: a launch after this one must not meet it at the endpoint's port
        store.wait(["closed"])
    except Exception:
        pass


def main(argv: list[str] | None = None) -> int:
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
    watchdog = Watchdog(args.dir)
    try:
        if args.node == 0:
            _host(args, secret)
        else:
            _join(args, secret, watchdog)
    except ExchangeError as exc:  # one line for the parent, which raises it
        watchdog.disarm()
        write_atomic(args.dir / UNANSWERED, f"{exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Which nodes a run spans, in torchrun's own words (`--nnodes`, `--node-rank`, `--rdzv-endpoint`, `--rdzv-id`), or
from Slurm's variables under `srun ds-doctor run`. Launches that span the nodes join torchrun's c10d rendezvous
at that endpoint; ds-doctor adds no launcher protocol of its own."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Mapping

DEFAULT_PORT = 29400  # torchrun's own default for --rdzv-endpoint without a port
DEFAULT_JOIN_TIMEOUT_S = 300.0
#: The most nodes a run may name (from --nnodes or Slurm's variables and host lists): checked before anything is
#: expanded, allocated or launched. The largest public training clusters are a few thousand nodes.
MAX_NODES = 65536


class ClusterError(ValueError):
    """Node options that do not make a cluster (one line, exit 2)."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """This node's place in a multi-node run. A single-node run has none."""

    nnodes: int
    node_rank: int
    host: str  # the rendezvous endpoint
    port: int
    rdzv_id: str
    join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.nnodes < 2:
            raise ClusterError(f"--nnodes {self.nnodes}: a multi-node run needs at least 2 nodes")
        if not 0 <= self.node_rank < self.nnodes:
            raise ClusterError(f"--node-rank {self.node_rank} is not in 0..{self.nnodes - 1}")
        if not self.host or not 0 < self.port < 65536:
            raise ClusterError(f"--rdzv-endpoint {self.endpoint!r} is not HOST:PORT")

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def launch_id(self, name: str) -> str:
        """The rendezvous id of one launch: the run's id and the launch, the same on every node."""
        return f"{self.rdzv_id}-{name}"


def parse_endpoint(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `HOST` (torchrun's default port), `[v6::addr]:PORT`."""
    match = re.fullmatch(
        r"\[(?P<v6>[^\]]+)\](?::(?P<v6port>\d{1,5}))?|(?P<host>[^:\s]+)(?::(?P<port>\d{1,5}))?", text.strip()
    )
    if not match:
        raise ClusterError(f"--rdzv-endpoint {text!r} is not HOST:PORT")
    host = match.group("v6") or match.group("host")
    port = match.group("v6port") or match.group("port")
    return host, int(port) if port else DEFAULT_PORT


def _split_top_level(text: str) -> list[str]:
    """Commas outside brackets separate hosts: `a[1-2,5],b` -> `a[1-2,5]`, `b`."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            raise ClusterError(f"unbalanced brackets in host list {text!r}")
        current += char
    if depth != 0:
        raise ClusterError(f"unbalanced brackets in host list {text!r}")
    return [p for p in [*parts, current] if p]


def _range(spec: str) -> list[str]:
    """`01-03,07` -> 01 02 03 07 (zero padding kept, as Slurm keeps it)."""
    out = []
    for item in spec.split(","):
        low, dash, high = item.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ClusterError(f"bad range {item!r} in a host list")
        if not dash:
            out.append(low)
            continue
        if len(low) > 9 or len(high) > 9 or int(high) - int(low) + 1 > MAX_NODES - len(out):
            raise ClusterError(f"the range {item!r} in a host list names more than {MAX_NODES} hosts")
        width = len(low) if low.startswith("0") else 0
        out += [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
    return out


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list, expanded as `scontrol show hostnames` would:
    `gpu[01-03],login1` -> gpu01 gpu02 gpu03 login1; `rack[1-2]-n[1-2]` -> rack1-n1 rack1-n2 rack2-n1 rack2-n2."""
    hosts: list[str] = []
    for part in _split_top_level(text.strip()):
        pieces = re.split(r"(\[[^\]]*\])", part)
        choices = [_range(p[1:-1]) if p.startswith("[") else [p] for p in pieces if p]
        if math.prod(len(c) for c in choices) > MAX_NODES - len(hosts):
            raise ClusterError(f"the host list {text[:200]!r} names more than {MAX_NODES} hosts")
        hosts += ["".join(combo) for combo in itertools.product(*choices)]
    return hosts


def _slurm_count(environ: Mapping[str, str], name: str, default: str | None = None) -> int | None:
    """A number Slurm put in the environment, checked: not a number, negative or past MAX_NODES is one line."""
    text = environ.get(name, default)
    if text is None or text == "":
        return None
    if not re.fullmatch(r"\d{1,9}", text.strip()) or int(text) >= MAX_NODES:
        raise ClusterError(f"{name}={text[:80]!r} is not a node count or index (0..{MAX_NODES - 1})")
    return int(text)


#: How long `scontrol show hostnames` may take: it only parses, but without a configuration it retries for a minute.
SCONTROL_BOUND_S = 5.0


def scontrol_hostnames(nodelist: str, expected: int) -> list[str] | None:
    """Slurm's own expansion of a host list (`scontrol show hostnames`), where scontrol is installed and answers
    within SCONTROL_BOUND_S with as many hosts as ds-doctor's own expansion (which bounded the count first)."""
    import shutil
    import subprocess

    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None
    try:
        done = subprocess.run(
            [scontrol, "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=SCONTROL_BOUND_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    hosts = done.stdout.split()
    return hosts if done.returncode == 0 and len(hosts) == expected else None


#: (node count, host list) as Slurm sets them, the step's first: under srun SLURM_NNODES is the step's count while
#: SLURM_JOB_NODELIST stays the job's (seen under `salloc -N2 srun -N1`: SLURM_NNODES=1, SLURM_JOB_NODELIST=n[1-2]).
SLURM_NODES = (
    ("SLURM_STEP_NUM_NODES", "SLURM_STEP_NODELIST"),
    ("SLURM_JOB_NUM_NODES", "SLURM_JOB_NODELIST"),
    ("SLURM_NNODES", "SLURM_JOB_NODELIST"),
    ("SLURM_NNODES", "SLURM_NODELIST"),
)


def from_slurm(environ: Mapping[str, str], port: int = DEFAULT_PORT) -> Cluster | None:
    """The cluster `srun ds-doctor run` is in: its job step's nodes (srun's SLURM_STEP_NUM_NODES and
    SLURM_STEP_NODELIST; the job's SLURM_NNODES and SLURM_JOB_NODELIST outside a step), R from SLURM_NODEID (the
    node's index within the step), the endpoint from the step's first host, the rendezvous id from SLURM_JOB_ID.
    None outside Slurm or on one node.

    The step's, not the job's: `srun -N2` inside a larger allocation runs on 2 of its nodes, SLURM_NODEID counts
    within those 2, and the job's first host may not be one of them (srun(1), ENVIRONMENT VARIABLES)."""
    count, listed = next(((c, n) for c, n in SLURM_NODES if environ.get(c) and environ.get(n)), (None, None))
    if count is None or listed is None:
        return None
    nnodes, nodelist = _slurm_count(environ, count), environ[listed]
    if not nnodes or nnodes < 2:
        return None
    hosts = expand_hostlist(nodelist)
    if len(hosts) != nnodes:
        raise ClusterError(f"{listed} {nodelist[:200]!r} names {len(hosts)} hosts, {count} says {nnodes}")
    hosts = scontrol_hostnames(nodelist, len(hosts)) or hosts
    return Cluster(
        nnodes=nnodes,
        node_rank=_slurm_count(environ, "SLURM_NODEID", "0") or 0,
        host=hosts[0],
        port=port,
        rdzv_id=f"slurm-{environ.get('SLURM_JOB_ID', 'job')}",
    )


def from_options(
    nnodes: int | None,
    node_rank: int | None,
    endpoint: str | None,
    rdzv_id: str | None,
    join_timeout_s: float,
    environ: Mapping[str, str],
) -> Cluster | None:
    """The options as given, else Slurm's variables; None for a single-node run. Options win over Slurm."""
    if nnodes is None and node_rank is None and endpoint is None:
        slurm = from_slurm(environ)
        return dataclasses.replace(slurm, join_timeout_s=join_timeout_s) if slurm else None
    if nnodes is None or node_rank is None or endpoint is None:
        raise ClusterError("a multi-node run needs --nnodes, --node-rank and --rdzv-endpoint together")
    if nnodes == 1:
        return None
    host, port = parse_endpoint(endpoint)
    return Cluster(
        nnodes=nnodes,
        node_rank=node_rank,
        host=host,
        port=port,
        rdzv_id=rdzv_id or "ds-doctor",
        join_timeout_s=join_timeout_s,
    )

"""A Slurm cluster of three compute nodes on this one machine, for the tests: munge with a key of its own,
slurmctld in a hub namespace, one slurmd per node namespace (its own address, host name and /etc/hosts), a
minimal configuration in a temporary folder (proctrack/linuxproc, task/none: no cgroups, no systemd).
Debian's `slurm-wlm` and `munge` packages provide the daemons; nothing of the machine's own is read or written."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from tests.cluster.lab import Lab, which

NODES = ("dsdr-n1", "dsdr-n2", "dsdr-n3")  # three: a step of two inside an allocation of three
NODELIST = "dsdr-n[1-3]"
PROGRAMS = (
    "munged",
    "mungekey",
    "slurmctld",
    "slurmd",
    "slurmstepd",
    "srun",
    "salloc",
    "sbatch",
    "scontrol",
    "sinfo",
)
START_S = 30.0


def missing_programs() -> str | None:
    """What is not installed (`apt-get install slurm-wlm munge`), in one line; None when all is there."""
    gone = [name for name in PROGRAMS if which(name) is None]
    return f"{', '.join(gone)} not installed (Debian: apt-get install slurm-wlm munge)" if gone else None


def config(root: Path, lab: Lab) -> str:
    """slurm.conf: only what a cluster without cgroups, accounting or systemd needs; every path in `root`."""
    nodes = "".join(
        f"NodeName={n} NodeAddr={lab.address[n]} NodeHostname={n} CPUs={os.cpu_count() or 1} State=UNKNOWN\n"
        for n in NODES
    )
    return f"""ClusterName=dsdr
SlurmctldHost=hub({lab.address["hub"]})
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool-%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/linear
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MessageTimeout=10
{nodes}PartitionName=debug Nodes={NODELIST} Default=YES MaxTime=INFINITE State=UP
"""


def cluster_env(root: Path, path_first: str) -> dict[str, str]:
    """The clients' environment: this cluster's configuration, ds-doctor's venv first on PATH (srun passes the
    environment on to the tasks)."""
    return {
        **os.environ,
        "SLURM_CONF": str(root / "slurm.conf"),
        "PATH": f"{path_first}:{os.environ.get('PATH', '/usr/bin:/bin')}:/usr/sbin",
    }


def start(root: Path, lab: Lab, path_first: str) -> dict[str, str]:
    """munged, slurmctld and both slurmds started in the lab; returns the clients' environment once both nodes are
    idle (or raises with the logs' tails)."""
    for folder in ("munge", "state", *(f"spool-{n}" for n in NODES)):
        (root / folder).mkdir(mode=0o755, parents=True, exist_ok=True)
    key = root / "munge" / "munge.key"
    subprocess.run(
        [str(which("mungekey")), "--create", f"--keyfile={key}"], check=True, capture_output=True, timeout=30
    )
    (root / "slurm.conf").write_text(config(root, lab))
    env = cluster_env(root, path_first)
    lab.start(
        "hub",
        [
            str(which("munged")),
            "--foreground",
            "--force",
            f"--socket={root}/munge/munge.socket",
            f"--key-file={key}",
            f"--pid-file={root}/munge/munged.pid",
            f"--log-file={root}/munge/munged.log",
            f"--seed-file={root}/munge/munged.seed",
        ],
        root / "munged.out",
        env,
    )
    lab.start(
        "hub",
        [str(which("slurmctld")), "-D", "-i", "-f", str(root / "slurm.conf")],
        root / "slurmctld.out",
        env,
        hostname=True,
    )
    for node in NODES:
        lab.start(
            node,
            [str(which("slurmd")), "-D", "-N", node, "-f", str(root / "slurm.conf")],
            root / f"slurmd-{node}.out",
            env,
            hostname=True,
        )
    wait_idle(root, lab, env)
    return env


def wait_idle(root: Path, lab: Lab, env: dict[str, str]) -> None:
    deadline = time.monotonic() + START_S
    states = ""
    while time.monotonic() < deadline:
        done = lab.run("hub", ["sinfo", "-h", "-N", "-o", "%N %t"], timeout=20, env=env)
        states = done.stdout.strip()
        if done.returncode == 0 and sorted(states.splitlines()) == [f"{n} idle" for n in NODES]:
            return
        time.sleep(0.5)
    logs = "".join(
        f"\n--- {p.name}\n" + p.read_text(errors="replace")[-1500:] for p in sorted(root.glob("*.log"))
    )
    raise RuntimeError(f"the nodes are not idle after {START_S:.0f} s (sinfo: {states!r}){logs}")

"""Hosts on this one machine for the tests across nodes: each a network namespace with its own address (not
loopback), and where asked its own host name and /etc/hosts. Everything a lab starts runs inside one of its
namespaces, so closing it ends every such process (found by namespace, not by name) and removes the namespaces.

Only the network namespace is entered (`nsenter --net`), with `unshare -u -m` for the host name and a private
/etc/hosts: `ip netns exec` also remounts /sys for the namespace, and slurmd then finds no cgroup hierarchy and
exits."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

SUBNET = "10.231.0"  # private to the lab's namespaces: two labs at once do not collide
NETNS_DIR = Path("/run/netns")


def which(name: str) -> str | None:
    """A program's path, /usr/sbin included (where ip and the daemons live; a user's PATH may lack it)."""
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")


def unusable() -> str | None:
    """Why this machine cannot hold a lab, in one line; None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "nsenter", "unshare", "mount", "hostname") if which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    probe = f"dsdr-probe-{secrets.token_hex(3)}"
    made = subprocess.run(
        [str(which("ip")), "netns", "add", probe], capture_output=True, text=True, timeout=20
    )
    subprocess.run([str(which("ip")), "netns", "delete", probe], capture_output=True, timeout=20)
    if made.returncode:
        return f"cannot create a network namespace: {made.stderr.strip()[:200]}"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run([str(which("ip")), *args], capture_output=True, text=True, timeout=20)
    if done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Lab:
    """Namespaces on one link. With `hub`, a bridge in a namespace of its own joins them all (the hub has the
    address .254); without, the first two are joined by one veth pair."""

    def __init__(self, root: Path, hosts: Sequence[str], hub: bool = False) -> None:
        self.root = root
        self.tag = f"dsdr{secrets.token_hex(3)}"
        self.hosts = list(hosts)
        self.names = {host: f"{self.tag}-{host}" for host in [*self.hosts, *(["hub"] if hub else [])]}
        self.address = {host: f"{SUBNET}.{i + 1}" for i, host in enumerate(self.hosts)}
        if hub:
            self.address["hub"] = f"{SUBNET}.254"
        self.interface = {host: f"dd-{host}"[:15] for host in self.names}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.hosts_file = root / "hosts"
        self.hosts_file.write_text(
            "127.0.0.1 localhost\n" + "".join(f"{a} {h}\n" for h, a in self.address.items())
        )

    def open(self) -> Lab:
        for name in self.names.values():
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
        if "hub" in self.names:
            _ip("-n", self.names["hub"], "link", "add", "br0", "type", "bridge")
            _ip("-n", self.names["hub"], "link", "set", "br0", "up")
            for host in self.hosts:
                self._veth(host, "hub", f"p-{host}"[:15])
                _ip("-n", self.names["hub"], "link", "set", f"p-{host}"[:15], "master", "br0")
            self._address("hub", "br0")
        else:
            first, second = self.hosts[:2]
            self._veth(first, second, self.interface[second])
        for host in self.hosts:
            self._address(host, self.interface[host])
        return self

    def _veth(self, host: str, peer_host: str, peer: str) -> None:
        """One veth pair made directly in the two namespaces (no name ever taken in the machine's own)."""
        _ip(
            "link",
            "add",
            self.interface[host],
            "netns",
            self.names[host],
            "type",
            "veth",
            "peer",
            "name",
            peer,
            "netns",
            self.names[peer_host],
        )
        _ip("-n", self.names[peer_host], "link", "set", peer, "up")

    def _address(self, host: str, interface: str) -> None:
        _ip("-n", self.names[host], "addr", "add", f"{self.address[host]}/24", "dev", interface)
        _ip("-n", self.names[host], "link", "set", interface, "up")

    def command(self, host: str, argv: Sequence[str], hostname: bool = False) -> list[str]:
        """`argv` inside `host`'s network namespace; with `hostname`, also under its own host name and /etc/hosts
        (a UTS and a mount namespace of its own, /sys left as it is)."""
        enter = [str(which("nsenter")), f"--net={NETNS_DIR / self.names[host]}"]
        if not hostname:
            return [*enter, *argv]
        setup = 'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"'
        return [
            *enter,
            str(which("unshare")),
            "-u",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            setup,
            host,
            str(self.hosts_file),
            *argv,
        ]

    def start(
        self,
        host: str,
        argv: Sequence[str],
        log: Path,
        env: dict[str, str] | None = None,
        hostname: bool = False,
    ) -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                self.command(host, argv, hostname),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def run(
        self,
        host: str,
        argv: Sequence[str],
        timeout: float,
        env: dict[str, str] | None = None,
        hostname: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(host, argv, hostname),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )

    def pids_in(self, host: str) -> list[int]:
        return self.pids([host])

    def pids(self, hosts: Sequence[str] | None = None) -> list[int]:
        """Every process inside the lab's namespaces (whoever started it: slurmstepd double-forks), or `hosts`'."""
        inodes = set()
        for name in (self.names[h] for h in hosts) if hosts is not None else self.names.values():
            with contextlib.suppress(OSError):
                inodes.add(f"net:[{(NETNS_DIR / name).stat().st_ino}]")
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "ns" / "net") in inodes:
                        found.append(int(entry.name))
        return found

    def kill(self, grace_s: float = 3.0) -> None:
        """SIGTERM everything in the namespaces, then SIGKILL what is left after `grace_s`."""
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait_s
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.1)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def close(self) -> None:
        self.kill()
        for name in self.names.values():
            subprocess.run([str(which("ip")), "netns", "delete", name], capture_output=True, timeout=20)


@contextlib.contextmanager
def lab(root: Path, hosts: Sequence[str], hub: bool = False) -> Iterator[Lab]:
    """A lab that is always closed (every process in it ended, every namespace removed), or a skip that says
    why this machine cannot hold one."""
    why = unusable()
    if why:
        pytest.skip(why)
    made = Lab(root, hosts, hub)
    try:
        try:
            made.open()
        except RuntimeError as exc:
            made.close()
            pytest.skip(f"cannot build the namespaces: {exc}")
        yield made
    finally:
        made.close()

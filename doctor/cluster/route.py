"""Which of this node's addresses and interfaces face the rendezvous: what torchrun and gloo otherwise guess from
the host name, and guess wrong where the host name resolves to loopback (Debian's `127.0.1.1 host` line, a
container's `127.0.0.1 host`) or names an address the other nodes cannot reach.

Three guesses go wrong on such a node (all found running two nodes in network namespaces of their own, with
addresses on a link between them rather than on 127.0.0.1):
  - torchrun's c10d rendezvous hosts its store only on a node whose host name matches the endpoint; an endpoint
    given as an address of a second interface matches no node, and every node waits as a client of a store that
    nobody serves (torch's `_matches_machine_hostname` says so itself: "may return a false negative if this
    machine has ... IP addresses assigned to secondary NICs"; pytorch/pytorch#73656, open since 2022, whose
    workaround is `is_host=1` with `--local_addr`). Here: `is_host=true` on the node that has it.
  - torchrun tells the ranks `MASTER_ADDR = socket.getfqdn()` of the node that got group rank 0: `localhost` or
    the host name, which on another node is that node. Here: `--local-addr`, the address facing the endpoint.
  - gloo binds to the address its host name resolves to, loopback as a fallback ("Connection refused,
    remote=[127.0.0.1]" on every rank: aws-samples/aws-do-eks#69, fixed there the same way). Here:
    `GLOO_SOCKET_IFNAME`, the interface facing the endpoint, unless the user set it.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import socket


@dataclasses.dataclass(frozen=True)
class Facing:
    """This node's side of the route to the rendezvous endpoint."""

    address: str  # the source address the kernel picks to reach the endpoint
    interface: str | None  # the interface holding that address
    # the endpoint is this node's own address, and torch would not know it from the host name
    hosts_endpoint: bool

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.address.split("%")[0]).is_loopback


def interface_of(address: str) -> str | None:
    """The interface that holds `address` (psutil reads them all, whatever the namespace's /sys shows)."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(
            a.address.split("%")[0] == address
            for a in addresses
            if a.family in (socket.AF_INET, socket.AF_INET6)
        ):
            return name
    return None


@functools.lru_cache(maxsize=8)
def facing(host: str, port: int) -> Facing | None:
    """The route to `host:port` as the kernel would take it (a UDP socket's connect sends nothing); None when the
    host does not resolve or no route leads there. The endpoint was resolved within a bound before (cli)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return None
    for family, _, _, _, sockaddr in infos:
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect(sockaddr)
            except OSError:
                continue
            source = str(sock.getsockname()[0])
        target = str(sockaddr[0])
        local = source == target and not ipaddress.ip_address(target.split("%")[0]).is_loopback
        return Facing(
            address=source,
            interface=interface_of(source),
            hosts_endpoint=local and not named_by_host_name(host),
        )
    return None


def named_by_host_name(host: str) -> bool:
    """Whether torch finds by itself that this node hosts `host` (its host name, or an address the host name
    resolves to). Then torch's own fall-back stays (host, else client), which two nodes on one machine need. (Two
    nodes on one machine whose endpoint is an address the host name does not resolve to both host: the second
    fails at once rather than both waiting for a store nobody serves, as before.)"""
    this = socket.gethostname()
    if host == this:
        return True
    try:
        mine = {info[4][0] for info in socket.getaddrinfo(this, None, proto=socket.IPPROTO_TCP)}
        theirs = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        return False
    return bool(mine & theirs)


def rendezvous_options(host: str, port: int) -> tuple[list[str], str]:
    """torchrun's options for a launch across the nodes (`--local-addr`) and what to add to its --rdzv-conf
    (`,is_host=true`), from the route to the endpoint; nothing where there is no route (torch guesses, as before)."""
    where = facing(host, port)
    if where is None:
        return [], ""
    return [f"--local-addr={where.address}"], ",is_host=true" if where.hosts_endpoint else ""

"""Which of this node's addresses and interfaces face the rendezvous: what gloo otherwise guesses from the host name,
and guesses wrong where the host name resolves to loopback (Debian's `127.0.1.1 host` line, a container's
`127.0.0.1 host`) or names an address the other nodes cannot reach.

gloo binds to the address its host name resolves to, loopback as a fallback ("Connection refused,
remote=[127.0.0.1]" on every rank: aws-samples/aws-do-eks#69, fixed there the same way; found running two nodes in
network namespaces of their own). Here: `GLOO_SOCKET_IFNAME`, the interface facing the endpoint, unless the user
set it. (Two more guesses went wrong while the launches across the nodes used torchrun's dynamic c10d rendezvous:
which node hosts its store, and the `MASTER_ADDR` it hands the ranks, pytorch/pytorch#73656. The static rendezvous
ds-doctor uses now has node 0 host the store and hands the ranks the endpoint as given.)
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
        return Facing(address=source, interface=interface_of(source))
    return None

"""InfiniBand (RDMA) ports in sysfs: each port's state, physical state, rate, link layer and error counters, as an
`IbRecord`.

`state` `4: ACTIVE`, `phys_state` `5: LinkUp`, `rate` `400 Gb/sec (4X NDR)`, `link_layer` `InfiniBand|Ethernet`,
`counters/<name>` one integer or `N/A (no PMA)` (Linux, drivers/infiniband/core/sysfs.c).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

from ds_doctor.hardware.bounded import NOT_LINUX, attribute, is_number, listdir, on_linux
from ds_doctor.reports.noderecords import IbPort, IbRecord, SourceState

MAX_IB_DEVICES = 64
MAX_IB_PORTS = 64
MAX_COUNTERS = 64
RATE = re.compile(r"^(?P<gbps>\d+(?:\.\d+)?) Gb/sec")


def _coded(text: str | None) -> tuple[int | None, str | None]:
    """`4: ACTIVE` -> (4, "ACTIVE")."""
    if not text:
        return None, None
    code, _, name = text.partition(":")
    try:
        return int(code), name.strip() or None
    except ValueError:
        return None, text[:64]


def _counters(port_dir: Path) -> tuple[dict[str, int], dict[str, str]]:
    """Each `counters/<name>` as an integer; the ones that are not (`N/A (no PMA)`, unreadable) with why."""
    counters: dict[str, int] = {}
    unreadable: dict[str, str] = {}
    for name in listdir(port_dir / "counters", MAX_COUNTERS):
        text, why = attribute(port_dir / "counters" / name, 64)
        if text is not None and is_number(text):
            counters[name[:64]] = int(text)
        else:
            unreadable[f"counters/{name[:64]}"] = why or (text or "empty")[:64]
    return counters, unreadable


def _ib_port(device: str, port: str, port_dir: Path) -> IbPort:
    unreadable: dict[str, str] = {}
    values: dict[str, str | None] = {}
    for name in ("state", "phys_state", "rate", "link_layer"):
        values[name], why = attribute(port_dir / name, 256)
        if why:
            unreadable[name] = why
    state_code, state = _coded(values["state"])
    phys_state_code, phys_state = _coded(values["phys_state"])
    rate = RATE.match(values["rate"] or "")
    counters, more = _counters(port_dir)
    return IbPort(
        device=device[:64],
        port=int(port) if is_number(port) else port[:16],
        state_code=state_code,
        state=state,
        phys_state_code=phys_state_code,
        phys_state=phys_state,
        rate=values["rate"][:64] if values["rate"] else None,
        rate_gbps=float(rate.group("gbps")) if rate else None,
        link_layer=values["link_layer"][:32] if values["link_layer"] else None,
        counters=counters,
        unreadable={**unreadable, **more},
    )


def _ib_ports(base: Path) -> Iterator[IbPort]:
    for device in listdir(base, MAX_IB_DEVICES):
        ports = listdir(base / device / "ports", MAX_IB_PORTS)
        for port in sorted(ports, key=lambda p: (not is_number(p), int(p) if is_number(p) else 0, p)):
            yield _ib_port(device, port, base / device / "ports" / port)


def read_ib(root: str | os.PathLike[str] = "/") -> IbRecord:
    """Every RDMA port's state, physical state, rate, link layer and error counters (cumulative since the HCA's
    counters were last cleared)."""
    if not on_linux():
        return IbRecord(SourceState.UNAVAILABLE, NOT_LINUX)
    base = Path(root) / "sys" / "class" / "infiniband"
    if not base.is_dir():
        return IbRecord(SourceState.ABSENT, "no RDMA device (no /sys/class/infiniband)")
    ports = tuple(_ib_ports(base))
    if not ports:
        return IbRecord(SourceState.ABSENT, "RDMA devices with no port in /sys/class/infiniband/*/ports")
    return IbRecord(SourceState.READ, ports=ports)

"""PCIe AER counters in sysfs of NVIDIA's devices, the RDMA NICs and the ports above them, as an `AerRecord`.

`aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal`: lines `<name> <count>`, an unnamed bit as
`dev_cor_errs_bit[N] <count>`, then `TOTAL_ERR_COR|TOTAL_ERR_NONFATAL|TOTAL_ERR_FATAL <count>` (Linux,
drivers/pci/pcie/aer.c; Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats shows older, longer names).
"""

from __future__ import annotations

import os
from pathlib import Path

from ds_doctor.hardware.bounded import (
    BDF,
    MAX_PCI_DEVICES,
    NOT_LINUX,
    attribute,
    is_number,
    listdir,
    on_linux,
    read_text,
    reason,
)
from ds_doctor.hardware.ib import MAX_IB_DEVICES
from ds_doctor.reports.noderecords import AerDevice, AerRecord, SourceState

AER_FILES = {"correctable": "aer_dev_correctable", "nonfatal": "aer_dev_nonfatal", "fatal": "aer_dev_fatal"}
NVIDIA_VENDOR = 0x10DE
CLASS_INFINIBAND = 0x0207


def parse_aer(text: str) -> tuple[int | None, dict[str, int]]:
    """(the TOTAL_ERR_* line's count, None without one; every other non-zero count by name) from one aer_dev_* file.
    Names may have spaces (older kernels: `Receiver Error 2`): the count is the line's last word."""
    total: int | None = None
    counts: dict[str, int] = {}
    for line in text.splitlines()[:256]:
        name, _, value = line.strip().rpartition(" ")
        if not name or not is_number(value):
            continue
        if name.startswith("TOTAL_ERR_"):
            total = int(value)
        elif int(value):
            counts[name.strip()[:64]] = int(value)
    return total, counts


def _hex_attr(path: Path) -> int | None:
    text, _ = attribute(path, 64)
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def _hex(value: int | None, digits: int) -> str | None:
    return None if value is None else f"0x{value:0{digits}x}"


def _rdma_devices(root: Path) -> set[str]:
    """PCI addresses of the RDMA devices (`/sys/class/infiniband/<dev>/device`): the NICs NCCL's IB transport uses,
    whatever their class or vendor (ConnectX in Ethernet mode, EFA, Broadcom RoCE)."""
    base = root / "sys" / "class" / "infiniband"
    found = set()
    for name in listdir(base, MAX_IB_DEVICES):
        target = os.path.realpath(base / name / "device")
        if BDF.match(os.path.basename(target)):
            found.add(os.path.basename(target).lower())
    return found


def _role(vendor: int | None, pci_class: int | None, rdma: bool) -> str | None:
    """Why a device is read: NVIDIA's (GPUs, NVSwitches), InfiniBand controllers and RDMA NICs; None: not read."""
    if vendor == NVIDIA_VENDOR:
        return "nvidia gpu" if pci_class is not None and pci_class >> 16 == 0x03 else "nvidia"
    if rdma or (pci_class is not None and pci_class >> 8 == CLASS_INFINIBAND):
        return "rdma nic"
    return None


def _upstream(device_dir: Path) -> list[str]:
    """The ports above a device (its sysfs path's PCI parents, nearest first): their counters are the link
    partner's view of the device's link (the ABI document: errors may be counted at the partner only)."""
    parts = Path(os.path.realpath(device_dir)).parts[:-1]
    return [part.lower() for part in reversed(parts) if BDF.match(part)]


def _aer_device(device_dir: Path, bdf: str, role: str) -> AerDevice | None:
    """One device's three counters (None: it has no AER files)."""
    if not any((device_dir / name).exists() for name in AER_FILES.values()):
        return None
    totals: dict[str, int | None] = {}
    unreadable: dict[str, str] = {}
    counts: dict[str, dict[str, int]] = {}
    for kind, name in AER_FILES.items():
        try:
            totals[kind], of_kind = parse_aer(read_text(device_dir / name))
        except OSError as exc:
            totals[kind] = None
            unreadable[kind] = reason(exc)
            continue
        if (
            totals[kind] is None
        ):  # every aer_dev_* file ends with its TOTAL_ERR_* line: this one is not the kernel's
            unreadable[kind] = "no TOTAL_ERR_* line"
        if of_kind:
            counts[kind] = of_kind
    return AerDevice(
        bdf=bdf,
        role=role,
        vendor=_hex(_hex_attr(device_dir / "vendor"), 4),
        pci_class=_hex(_hex_attr(device_dir / "class"), 6),
        unreadable=unreadable,
        counts=counts,
        correctable=totals["correctable"],
        nonfatal=totals["nonfatal"],
        fatal=totals["fatal"],
    )


def _chosen_devices(root: Path) -> dict[str, str]:
    """{pci address: role} of the devices read, and of the ports above them."""
    devices_dir = root / "sys" / "bus" / "pci" / "devices"
    rdma = _rdma_devices(root)
    chosen: dict[str, str] = {}
    for name in listdir(devices_dir, MAX_PCI_DEVICES):
        bdf = name.lower()
        role = _role(
            _hex_attr(devices_dir / name / "vendor"), _hex_attr(devices_dir / name / "class"), bdf in rdma
        )
        if role is not None:
            chosen[bdf] = role
    for bdf in list(chosen):
        for port in _upstream(devices_dir / bdf):
            chosen.setdefault(port, f"port above {bdf}")
    return chosen


def read_aer(root: str | os.PathLike[str] = "/") -> AerRecord:
    """AER counters (since boot) of NVIDIA's devices and the RDMA NICs, and of the ports above them. Other devices
    (a management NIC, NVMe) are not a training job's path and are not read."""
    if not on_linux():
        return AerRecord(SourceState.UNAVAILABLE, NOT_LINUX)
    base = Path(root)
    devices_dir = base / "sys" / "bus" / "pci" / "devices"
    if not devices_dir.is_dir():
        return AerRecord(SourceState.UNAVAILABLE, "no /sys/bus/pci/devices (sysfs not mounted here)")
    chosen = _chosen_devices(base)
    if not chosen:
        return AerRecord(SourceState.ABSENT, "no NVIDIA or RDMA PCI device")
    devices = []
    for bdf, role in sorted(chosen.items()):
        device = _aer_device(devices_dir / bdf, bdf, role)
        if device is not None:
            devices.append(device)
    if not devices:
        return AerRecord(
            SourceState.UNAVAILABLE,
            f"none of the {len(chosen)} NVIDIA/RDMA devices or their ports has AER counters (no aer_dev_* files: "
            "a kernel without CONFIG_PCIEAER, or firmware-first error handling)",
        )
    return AerRecord(SourceState.READ, devices=tuple(devices))

"""Xid errors in the kernel log: the NVIDIA driver's own lines since boot, grouped by (GPU, Xid), and the GPUs the
driver lists (/proc/driver/nvidia/gpus), as an `XidRecord`.

The line is `NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s` (NVIDIA open-gpu-kernel-modules,
src/nvidia/src/kernel/gpu/rc/kernel_rc.c, krcReportXid; MIG GPUs add ` GPU-I:%02u[ GPU-CI:%02u]` inside the
parenthesis; drivers before the open modules wrote `NVRM: Xid (0000:01:00): 13, ...`), always at the start of the
kernel's text: an Xid is read there only, after the stamp dmesg or the journal put before it.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from collections.abc import Sequence
from pathlib import Path

from ds_doctor.hardware.bounded import (
    BDF,
    MAX_PCI_DEVICES,
    MESSAGE_CHARS,
    NOT_LINUX,
    CommandOutput,
    Runner,
    on_linux,
    run_bounded,
)
from ds_doctor.reports.noderecords import SourceState, XidEvent, XidRecord

#: The kernel ring buffer is at most 32 MiB (CONFIG_LOG_BUF_SHIFT=25); its newest 16 MiB are kept.
KERNEL_LOG_BYTES = 16 << 20
KERNEL_LOG_SECONDS = 5.0
MAX_XID_GROUPS = 256

#: What the log tools put before the kernel's own text, and nothing else: dmesg's stamp (`[  812.442113]`, or
#: `[Tue Mar  3 10:00:01 2026]` with --ctime), or the journal's `Mar 03 10:00:01 host kernel: ` (a syslog file adds
#: dmesg's stamp after it); then printk's caller id (`[  T1896]`) where the kernel is built with CONFIG_PRINTK_CALLER.
#: A line with none of them (a log kept without stamps) starts with the text itself. An indented line is another
#: message's continuation: it has no prefix and never matches.
PREFIX = re.compile(
    r"^(?:\[(?P<bracket>[^\]]{1,40})\] ?"
    r"|(?P<syslog>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d) [^ ]{1,255} kernel: (?:\[[^\]]{1,40}\] ?)?)?"
    r"(?:\[ {0,8}[TC]\d{1,10}\] ?)?"
)
#: The driver's line (see the module docstring), matched where the prefix ends and nowhere else: its PCI address,
#: the MIG attribution it prints (`GPU-I:05`, `GPU-I:05 GPU-CI:00`), the Xid and the rest. Any user can get text
#: into the kernel log (messages that quote a process name or a file name), so the same words inside another
#: message are not the driver's.
XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.[0-7])?"
    r"(?P<mig>(?: GPU-I:\d{1,5})?(?: GPU-CI?:\d{1,5})?)\): (?P<xid>\d{1,5}),\s?(?P<rest>.*)"
)
#: `pid=..., name=..., <message>`; some drivers print no name (`pid=1896, Row Remapper: ...`).
XID_PROCESS = re.compile(r"^pid=(?P<pid>[^,]{0,40}),(?: name=(?P<name>[^,]{0,80}),)? (?P<message>.*)$")
#: Longer lines are cut before matching: the driver's own lines are well under this.
LINE_CHARS = 4096

KERNEL_LOG_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("dmesg", "--kernel"),
    ("dmesg",),
    # the newest 100,000 kernel lines of this boot (about 12 MB): a node up for months logs more than is kept
    ("journalctl", "-k", "-b", "-n", "100000", "--no-pager", "-q"),
)


def pci_key(address: str | None) -> str | None:
    """`0000:3b:00` from NVML's `00000000:3B:00.0` or the driver's `0000:3b:00`: domain, bus, device."""
    if not address:
        return None
    match = re.match(r"^([0-9a-fA-F]{1,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})", address.strip())
    if not match:
        return None
    return f"{int(match.group(1), 16):04x}:{match.group(2).lower()}:{match.group(3).lower()}"


def xid_event(line: str) -> XidEvent | None:
    """The Xid of a line that is the driver's own (its text right after the log's prefix), seen once, or None."""
    line = line[:LINE_CHARS]
    prefix = PREFIX.match(line)
    assert prefix is not None  # every part of the prefix is optional: it matches, maybe empty
    match = XID_LINE.match(line, prefix.end())
    if not match:
        return None
    rest = match.group("rest").strip()
    process = XID_PROCESS.match(rest)
    message = (process.group("message") if process else rest)[:MESSAGE_CHARS]
    at = (prefix.group("bracket") or prefix.group("syslog") or "").strip() or None
    return XidEvent(
        xid=int(match.group("xid")),
        pci=pci_key(match.group("pci")),
        mig=match.group("mig").strip() or None,
        process=((process.group("name") or "").strip() or None) if process else None,
        message=message,
        first_at=at,
        last_at=at,
        last_message=message,
    )


@dataclasses.dataclass
class _Group:
    """One (GPU, Xid) while the log is read: its first event, and how many and the last one so far."""

    first: XidEvent
    count: int = 1
    last: XidEvent | None = None

    def event(self) -> XidEvent:
        last = self.last or self.first
        return dataclasses.replace(
            self.first, count=self.count, last_at=last.first_at, last_message=last.message
        )


def parse_xid_log(text: str) -> tuple[list[XidEvent], int]:
    """(Xid events grouped by (GPU, Xid) in the order first seen: how many times, the first and last message and
    when, as the log stamped them; how many events fell outside the first MAX_XID_GROUPS groups)."""
    groups: dict[tuple[str | None, int | None], _Group] = {}
    other = 0
    for line in text.splitlines():
        event = xid_event(line) if "NVRM: Xid" in line else None
        if event is None:
            continue
        group = groups.get((event.pci, event.xid))
        if group is not None:
            group.count += 1
            group.last = event
        elif len(groups) < MAX_XID_GROUPS:
            groups[(event.pci, event.xid)] = _Group(event)
        else:
            other += 1
    return [group.event() for group in groups.values()], other


def _log_problem(argv: Sequence[str], out: CommandOutput, timeout_s: float) -> str | None:
    """Why this command's output is no kernel log (None: it is one, maybe partial)."""
    name = " ".join(argv)
    if out.error:
        return out.error
    if not out.stdout.strip():
        if out.timed_out:
            return f"{name}: gave nothing in {timeout_s:g} s"
        if out.returncode:
            return f"{name}: {out.reason()}"
        if argv[0] == "journalctl":
            return f"{name}: no kernel message visible (the journal is read by root and the systemd-journal group)"
        return f"{name}: printed nothing"
    if out.returncode and not out.timed_out and not out.truncated:
        return f"{name}: {out.reason()}"
    return None


def driver_gpus(root: str | os.PathLike[str] = "/") -> list[str] | None:
    """The PCI addresses (`0000:3b:00`) of the GPUs NVIDIA's driver probed: a folder each in /proc/driver/nvidia/gpus,
    which no user can write. A GPU that fell off the bus stays listed there (NVML no longer reads its address), and
    a container sees only the GPUs it was given. None where the folder cannot be listed."""
    try:
        with os.scandir(Path(root) / "proc" / "driver" / "nvidia" / "gpus") as entries:
            names = [entry.name for entry in itertools.islice(entries, MAX_PCI_DEVICES)]
    except OSError:
        return None
    return sorted({key for name in names if BDF.match(name) and (key := pci_key(name)) is not None})


def _partial(out: CommandOutput, timeout_s: float) -> str | None:
    said = [f"only its last {len(out.stdout)} bytes kept"] if out.truncated else []
    said += [f"stopped after {timeout_s:g} s"] if out.timed_out else []
    return "; ".join(said) or None


def read_xids(
    root: str | os.PathLike[str] = "/",
    runner: Runner = run_bounded,
    *,
    timeout_s: float = KERNEL_LOG_SECONDS,
    max_bytes: int = KERNEL_LOG_BYTES,
) -> XidRecord:
    """The Xid errors the NVIDIA driver logged since boot, from `dmesg` (or the journal where the kernel ring
    buffer is restricted, kernel.dmesg_restrict=1), with the GPUs the driver lists (`driver_gpus`, where its
    folder could be listed: the rules judge an Xid a fault of this node only where its address is one of them or
    one NVML reads). Absent where NVIDIA's driver is not loaded."""
    if not on_linux():
        return XidRecord(SourceState.UNAVAILABLE, NOT_LINUX)
    if not (Path(root) / "proc" / "driver" / "nvidia").exists():
        return XidRecord(
            SourceState.ABSENT,
            "NVIDIA's kernel driver is not loaded (no /proc/driver/nvidia): no Xid to read",
        )
    tried = []
    for argv in KERNEL_LOG_COMMANDS:
        out = runner(argv, timeout_s, max_bytes)
        problem = _log_problem(argv, out, timeout_s)
        if problem is not None:
            tried.append(problem)
            continue
        events, left_out = parse_xid_log(out.stdout.decode("utf-8", "replace"))
        listed = driver_gpus(root)
        return XidRecord(
            SourceState.READ,
            source=" ".join(argv),
            partial=_partial(out, timeout_s),
            events=tuple(events),
            left_out=left_out,
            driver_gpus=None if listed is None else tuple(listed),
        )
    return XidRecord(SourceState.UNAVAILABLE, "; ".join(tried))

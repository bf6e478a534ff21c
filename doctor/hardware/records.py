"""The node's own fault records, read as the kernel and NVIDIA's tools leave them: Xid errors in the kernel log,
PCIe AER counters and InfiniBand ports in sysfs, and DCGM's quick diagnostic (`dcgmi diag -r 1`).

Each reader returns a JSON-safe dict for the hardware section, and never raises. Its `state` says what it got:
`read` (the data beside it), `absent` (the record does not exist on this node: no NVIDIA driver, no RDMA device,
no dcgmi; `reason` says which) or `unavailable` (it exists but could not be read: no permission, a command that
failed or hung, not Linux; `reason` says why). Everything read is bounded, in bytes and in time: a kernel log of
a gigabyte, a binary file, a FIFO where a sysfs file should be and a command that never ends are ordinary input.
The readers take a root folder (a fake sysfs tree in the tests) and a command runner the tests replace. The rules
over these dicts are in `ds_doctor.checks.noderecords`.

Formats, as their sources write them (tests/resources/noderecords/README.md cites each):
- Xid: `NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, %s` (NVIDIA open-gpu-kernel-modules,
  src/nvidia/src/kernel/gpu/rc/kernel_rc.c, krcReportXid; MIG GPUs add ` GPU-I:%02u[ GPU-CI:%02u]` inside the
  parenthesis; drivers before the open modules wrote `NVRM: Xid (0000:01:00): 13, ...`), always at the start of
  the kernel's text: an Xid is read there only, after the stamp dmesg or the journal put before it.
- AER: `aer_dev_correctable`, `aer_dev_nonfatal`, `aer_dev_fatal`: lines `<name> <count>`, an unnamed bit as
  `dev_cor_errs_bit[N] <count>`, then `TOTAL_ERR_COR|TOTAL_ERR_NONFATAL|TOTAL_ERR_FATAL <count>` (Linux,
  drivers/pci/pcie/aer.c; Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats shows older, longer names).
- InfiniBand: `state` `4: ACTIVE`, `phys_state` `5: LinkUp`, `rate` `400 Gb/sec (4X NDR)`, `link_layer`
  `InfiniBand|Ethernet`, `counters/<name>` one integer or `N/A (no PMA)` (Linux, drivers/infiniband/core/sysfs.c).
- DCGM: `dcgmi diag -j` (NVIDIA/DCGM dcgmi/Diag.cpp, HelperJsonBuildOutput; keys nvvs/include/NvvsJsonStrings.h).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import re
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

READ = "read"
ABSENT = "absent"
UNAVAILABLE = "unavailable"

#: Bounds on what a reader takes in: a sysfs attribute is a page (4 KiB); 64 KiB is already hostile.
FILE_BYTES = 64 << 10
#: The kernel ring buffer is at most 32 MiB (CONFIG_LOG_BUF_SHIFT=25); its newest 16 MiB are kept.
KERNEL_LOG_BYTES = 16 << 20
KERNEL_LOG_SECONDS = 5.0
DCGM_SECONDS = 120.0
DCGM_BYTES = 4 << 20
#: A command's stderr is kept for its first line of reason only.
STDERR_BYTES = 4 << 10
#: Reading stops (and the command is killed) past this many times the bytes kept: `yes` is not a kernel log.
READ_FACTOR = 4
MAX_PCI_DEVICES = 4096
MAX_IB_DEVICES = 64
MAX_IB_PORTS = 64
MAX_COUNTERS = 64
MAX_XID_GROUPS = 256
MAX_DCGM_RESULTS = 256
MESSAGE_CHARS = 300

NVIDIA_VENDOR = 0x10DE
CLASS_INFINIBAND = 0x0207
BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _record(state: str, reason: str | None = None, **data: Any) -> dict[str, Any]:
    return {"state": state, "reason": reason, **data}


def _is_number(text: str) -> bool:
    """ASCII digits only (`str.isdigit` also takes `²`, which `int` refuses)."""
    return text.isascii() and text.isdigit() and len(text) <= 20


def _on_linux() -> bool:
    return sys.platform.startswith("linux")


NOT_LINUX = "not Linux: the kernel log, sysfs and DCGM are read on Linux only"


# ---- bounded reads: files and commands ---------------------------------------------------------------------------


def read_text(path: Path, limit: int = FILE_BYTES) -> str:
    """At most `limit` bytes of a regular file as text (bad bytes replaced). A FIFO, a socket or a device where a
    sysfs attribute should be raises OSError before anything blocks (opened non-blocking, checked with fstat)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        data = os.read(fd, limit)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


def _attribute(path: Path, limit: int = FILE_BYTES) -> tuple[str | None, str | None]:
    """(the file's first line, None) or (None, why not)."""
    try:
        text = read_text(path, limit)
    except OSError as exc:
        return None, _reason(exc)
    return text.strip().splitlines()[0] if text.strip() else "", None


def _listdir(path: Path, limit: int) -> list[str]:
    """At most `limit` names of a folder, sorted; none where it cannot be listed."""
    try:
        with os.scandir(path) as entries:
            names = []
            for entry in entries:
                names.append(entry.name)
                if len(names) >= limit:
                    break
    except OSError:
        return []
    return sorted(names)


@dataclasses.dataclass(frozen=True)
class CommandOutput:
    """What a bounded command left: `stdout` is its last `max_bytes` (the newest lines of a log), `truncated`
    says some came before; `error` is why it could not start."""

    returncode: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    timed_out: bool = False
    truncated: bool = False
    error: str | None = None

    def reason(self) -> str:
        """One line saying what went wrong (stderr's first line, or the exit status)."""
        if self.error:
            return self.error
        first = self.stderr.decode("utf-8", "replace").strip().splitlines()
        return first[0][:MESSAGE_CHARS] if first else f"exit status {self.returncode}"


#: (argv, timeout in seconds, max stdout bytes kept) -> what came back. Tests pass their own.
Runner = Callable[[Sequence[str], float, int], CommandOutput]


class _Collector:
    """Keeps a command's stdout tail and stderr head while reading, and knows when to stop."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.out = bytearray()
        self.err = bytearray()
        self.read = 0
        self.truncated = False

    def take(self, is_stdout: bool, chunk: bytes) -> None:
        if not is_stdout:
            self.err += chunk[: max(0, STDERR_BYTES - len(self.err))]
            return
        self.read += len(chunk)
        self.out += chunk
        if (
            len(self.out) > 2 * self.max_bytes
        ):  # trimmed now and then, not at every chunk: each trim moves the tail
            self.trim()

    def trim(self) -> bytes:
        if len(self.out) > self.max_bytes:
            del self.out[: len(self.out) - self.max_bytes]
            self.truncated = True
        return bytes(self.out)

    @property
    def flooded(self) -> bool:
        return self.read > self.max_bytes * READ_FACTOR


def _finish(proc: subprocess.Popen[bytes], stop: bool) -> None:
    """Reap the command; where it has to be stopped (timed out, flooding, or still running a second after closing
    its output), kill it and whatever it started (its own session, so its process group) first. The group is
    killed before the leader is reaped, so its id cannot belong to anyone else yet. A process stuck in the kernel
    (D state) is left behind rather than waited on."""
    if not stop:
        try:
            proc.wait(timeout=1.0)
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        pass


def _pump(proc: subprocess.Popen[bytes], keep: _Collector, deadline: float) -> bool:
    """Read both pipes until they close, the deadline passes or the output floods; True when it timed out."""
    assert proc.stdout is not None and proc.stderr is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, True)
        selector.register(proc.stderr, selectors.EVENT_READ, False)
        while selector.get_map() and not keep.flooded:
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    keep.take(key.data, chunk)
                else:
                    selector.unregister(key.fileobj)
    return False


def run_bounded(argv: Sequence[str], timeout_s: float, max_bytes: int) -> CommandOutput:
    """Run a command with no input, in its own session, C locale; keep the last `max_bytes` of its output; kill it
    (and its children) at `timeout_s` or when it floods. Never raises."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=env,
        )
    except (OSError, ValueError) as exc:
        return CommandOutput(None, error=f"{argv[0] if argv else '?'}: {_reason(exc)}")
    keep = _Collector(max_bytes)
    timed_out = True
    try:
        timed_out = _pump(proc, keep, time.monotonic() + timeout_s)
    finally:
        _finish(proc, stop=timed_out or keep.flooded)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    return CommandOutput(
        proc.returncode,
        keep.trim(),
        bytes(keep.err),
        timed_out=timed_out,
        truncated=keep.truncated or keep.flooded,
    )


# ---- Xid errors in the kernel log --------------------------------------------------------------------------------

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


def _xid_event(line: str) -> dict[str, Any] | None:
    """The Xid of a line that is the driver's own (its text right after the log's prefix), or None."""
    line = line[:LINE_CHARS]
    prefix = PREFIX.match(line)
    assert prefix is not None  # every part of the prefix is optional: it matches, maybe empty
    match = XID_LINE.match(line, prefix.end())
    if not match:
        return None
    rest = match.group("rest").strip()
    process = XID_PROCESS.match(rest)
    return {
        "xid": int(match.group("xid")),
        "pci": pci_key(match.group("pci")),
        "mig": match.group("mig").strip() or None,
        "process": ((process.group("name") or "").strip() or None) if process else None,
        "message": (process.group("message") if process else rest)[:MESSAGE_CHARS],
        "at": (prefix.group("bracket") or prefix.group("syslog") or "").strip() or None,
    }


def parse_xid_log(text: str) -> tuple[list[dict[str, Any]], int]:
    """(Xid events grouped by (GPU, Xid) in the order first seen: how many times, the first and last message and
    when, as the log stamped them; how many events fell outside the first MAX_XID_GROUPS groups)."""
    groups: dict[tuple[str | None, int], dict[str, Any]] = {}
    other = 0
    for line in text.splitlines():
        event = _xid_event(line) if "NVRM: Xid" in line else None
        if event is None:
            continue
        at = event.pop("at")
        group = groups.get((event["pci"], event["xid"]))
        if group is not None:
            group.update(count=group["count"] + 1, last_at=at, last_message=event["message"])
        elif len(groups) < MAX_XID_GROUPS:
            groups[(event["pci"], event["xid"])] = {
                **event,
                "count": 1,
                "first_at": at,
                "last_at": at,
                "last_message": event["message"],
            }
        else:
            other += 1
    return list(groups.values()), other


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


def read_xids(
    root: str | os.PathLike[str] = "/",
    runner: Runner = run_bounded,
    *,
    timeout_s: float = KERNEL_LOG_SECONDS,
    max_bytes: int = KERNEL_LOG_BYTES,
) -> dict[str, Any]:
    """The Xid errors the NVIDIA driver logged since boot, from `dmesg` (or the journal where the kernel ring
    buffer is restricted, kernel.dmesg_restrict=1), with the GPUs the driver lists (`driver_gpus`, where its
    folder could be listed: the rules judge an Xid a fault of this node only where its address is one of them or
    one NVML reads). Absent where NVIDIA's driver is not loaded."""
    if not _on_linux():
        return _record(UNAVAILABLE, NOT_LINUX)
    if not (Path(root) / "proc" / "driver" / "nvidia").exists():
        return _record(
            ABSENT, "NVIDIA's kernel driver is not loaded (no /proc/driver/nvidia): no Xid to read"
        )
    tried = []
    for argv in KERNEL_LOG_COMMANDS:
        out = runner(argv, timeout_s, max_bytes)
        problem = _log_problem(argv, out, timeout_s)
        if problem is not None:
            tried.append(problem)
            continue
        said = [f"only its last {len(out.stdout)} bytes kept"] if out.truncated else []
        said += [f"stopped after {timeout_s:g} s"] if out.timed_out else []
        partial = "; ".join(said) or None
        events, left_out = parse_xid_log(out.stdout.decode("utf-8", "replace"))
        listed = driver_gpus(root)
        gpus = {"driver_gpus": listed} if listed is not None else {}  # a list the rules can check against
        return _record(
            READ, None, source=" ".join(argv), partial=partial, events=events, left_out=left_out, **gpus
        )
    return _record(UNAVAILABLE, "; ".join(tried))


# ---- PCIe AER counters -------------------------------------------------------------------------------------------

AER_FILES = {"correctable": "aer_dev_correctable", "nonfatal": "aer_dev_nonfatal", "fatal": "aer_dev_fatal"}


def parse_aer(text: str) -> tuple[int | None, dict[str, int]]:
    """(the TOTAL_ERR_* line's count, None without one; every other non-zero count by name) from one aer_dev_* file.
    Names may have spaces (older kernels: `Receiver Error 2`): the count is the line's last word."""
    total: int | None = None
    counts: dict[str, int] = {}
    for line in text.splitlines()[:256]:
        name, _, value = line.strip().rpartition(" ")
        if not name or not _is_number(value):
            continue
        if name.startswith("TOTAL_ERR_"):
            total = int(value)
        elif int(value):
            counts[name.strip()[:64]] = int(value)
    return total, counts


def _hex_attr(path: Path) -> int | None:
    text, _ = _attribute(path, 64)
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
    for name in _listdir(base, MAX_IB_DEVICES):
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


def _aer_device(device_dir: Path, bdf: str, role: str) -> dict[str, Any] | None:
    """One device's three counters (None: it has no AER files)."""
    if not any((device_dir / name).exists() for name in AER_FILES.values()):
        return None
    entry: dict[str, Any] = {
        "bdf": bdf,
        "role": role,
        "vendor": _hex(_hex_attr(device_dir / "vendor"), 4),
        "class": _hex(_hex_attr(device_dir / "class"), 6),
    }
    entry["unreadable"] = {}
    entry["counts"] = {}
    for kind, name in AER_FILES.items():
        try:
            total, counts = parse_aer(read_text(device_dir / name))
        except OSError as exc:
            entry[kind] = None
            entry["unreadable"][kind] = _reason(exc)
            continue
        entry[kind] = total
        if total is None:  # every aer_dev_* file ends with its TOTAL_ERR_* line: this one is not the kernel's
            entry["unreadable"][kind] = "no TOTAL_ERR_* line"
        if counts:
            entry["counts"][kind] = counts
    return entry


def _chosen_devices(root: Path) -> dict[str, str]:
    """{pci address: role} of the devices read, and of the ports above them."""
    devices_dir = root / "sys" / "bus" / "pci" / "devices"
    rdma = _rdma_devices(root)
    chosen: dict[str, str] = {}
    for name in _listdir(devices_dir, MAX_PCI_DEVICES):
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


def read_aer(root: str | os.PathLike[str] = "/") -> dict[str, Any]:
    """AER counters (since boot) of NVIDIA's devices and the RDMA NICs, and of the ports above them. Other devices
    (a management NIC, NVMe) are not a training job's path and are not read."""
    if not _on_linux():
        return _record(UNAVAILABLE, NOT_LINUX)
    base = Path(root)
    devices_dir = base / "sys" / "bus" / "pci" / "devices"
    if not devices_dir.is_dir():
        return _record(UNAVAILABLE, "no /sys/bus/pci/devices (sysfs not mounted here)")
    chosen = _chosen_devices(base)
    if not chosen:
        return _record(ABSENT, "no NVIDIA or RDMA PCI device")
    devices = []
    for bdf, role in sorted(chosen.items()):
        entry = _aer_device(devices_dir / bdf, bdf, role)
        if entry is not None:
            devices.append(entry)
    if not devices:
        return _record(
            UNAVAILABLE,
            f"none of the {len(chosen)} NVIDIA/RDMA devices or their ports has AER counters (no aer_dev_* files: "
            "a kernel without CONFIG_PCIEAER, or firmware-first error handling)",
        )
    return _record(READ, None, devices=devices)


# ---- InfiniBand ports --------------------------------------------------------------------------------------------

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
    for name in _listdir(port_dir / "counters", MAX_COUNTERS):
        text, why = _attribute(port_dir / "counters" / name, 64)
        if text is not None and _is_number(text):
            counters[name[:64]] = int(text)
        else:
            unreadable[f"counters/{name[:64]}"] = why or (text or "empty")[:64]
    return counters, unreadable


def _ib_port(device: str, port: str, port_dir: Path) -> dict[str, Any]:
    entry: dict[str, Any] = {"device": device[:64], "port": int(port) if _is_number(port) else port[:16]}
    unreadable: dict[str, str] = {}
    values: dict[str, str | None] = {}
    for name in ("state", "phys_state", "rate", "link_layer"):
        values[name], why = _attribute(port_dir / name, 256)
        if why:
            unreadable[name] = why
    entry["state_code"], entry["state"] = _coded(values["state"])
    entry["phys_state_code"], entry["phys_state"] = _coded(values["phys_state"])
    entry["rate"] = values["rate"][:64] if values["rate"] else None
    rate = RATE.match(values["rate"] or "")
    entry["rate_gbps"] = float(rate.group("gbps")) if rate else None
    entry["link_layer"] = values["link_layer"][:32] if values["link_layer"] else None
    entry["counters"], more = _counters(port_dir)
    entry["unreadable"] = {**unreadable, **more}
    return entry


def _ib_ports(base: Path) -> Iterator[dict[str, Any]]:
    for device in _listdir(base, MAX_IB_DEVICES):
        ports = _listdir(base / device / "ports", MAX_IB_PORTS)
        for port in sorted(ports, key=lambda p: (not _is_number(p), int(p) if _is_number(p) else 0, p)):
            yield _ib_port(device, port, base / device / "ports" / port)


def read_ib(root: str | os.PathLike[str] = "/") -> dict[str, Any]:
    """Every RDMA port's state, physical state, rate, link layer and error counters (cumulative since the HCA's
    counters were last cleared)."""
    if not _on_linux():
        return _record(UNAVAILABLE, NOT_LINUX)
    base = Path(root) / "sys" / "class" / "infiniband"
    if not base.is_dir():
        return _record(ABSENT, "no RDMA device (no /sys/class/infiniband)")
    ports = list(_ib_ports(base))
    if not ports:
        return _record(ABSENT, "RDMA devices with no port in /sys/class/infiniband/*/ports")
    return _record(READ, None, ports=ports)


# ---- DCGM's quick diagnostic -------------------------------------------------------------------------------------

DCGM_COMMAND = ("diag", "-r", "1", "-j")
#: `DCGM Diagnostic` since DCGM 4 (NvvsJsonStrings.h NVVS_NAME); `DCGM GPU Diagnostic` before it.
DCGM_ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
STATUSES = {"pass": "Pass", "fail": "Fail", "warn": "Warn", "skip": "Skip", "not run": "Not Run"}


def _json_object(text: str) -> Any:
    """The JSON object in a command's output (dcgmi may print a line before it), or None."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        return json.loads(text[start : end + 1])
    except (ValueError, RecursionError):
        return None


def _entity(result: Mapping[str, Any]) -> str | None:
    """`GPU 0` (DCGM 4: entity_group and entity_id), `GPU 0,1` (DCGM 3: gpu_ids), None (a test's summary)."""
    if "entity_id" in result:
        return f"{str(result.get('entity_group') or 'GPU')[:16]} {str(result['entity_id'])[:16]}"
    if "gpu_ids" in result:
        return f"GPU {str(result['gpu_ids'])[:64]}"
    return None


def _texts(values: Any, key: str | None = None) -> list[str]:
    if not isinstance(values, list):
        return []
    out = []
    for value in values[:16]:
        text = value.get(key) if key and isinstance(value, Mapping) else value
        if isinstance(text, str):
            out.append(text[:MESSAGE_CHARS])
    return out


def _dcgm_result(category: str, test: str, result: Mapping[str, Any]) -> dict[str, Any]:
    status = str(result.get("status") or "")
    warnings = result.get("warnings")
    ids = (
        [w.get("error_id") for w in warnings[:16] if isinstance(w, Mapping)]
        if isinstance(warnings, list)
        else []
    )
    return {
        "category": category[:64],
        "test": test[:64],
        "entity": _entity(result),
        "status": STATUSES.get(status.strip().lower(), status[:16]),
        "warnings": _texts(warnings, "warning"),
        "error_ids": [i for i in ids if isinstance(i, int)],
        "info": _texts(result.get("info")),
    }


def _dcgm_tests(root: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for category in root.get("test_categories") or ():
        if not isinstance(category, Mapping):
            continue
        for test in category.get("tests") or ():
            if not isinstance(test, Mapping):
                continue
            results = [r for r in test.get("results") or () if isinstance(r, Mapping)]
            summary = test.get("test_summary")
            for result in results or ([summary] if isinstance(summary, Mapping) else []):
                yield _dcgm_result(str(category.get("category") or ""), str(test.get("name") or ""), result)


def parse_dcgm(data: Any) -> dict[str, Any]:
    """A record from `dcgmi diag -j`'s JSON: each test's result per entity (at most MAX_DCGM_RESULTS)."""
    if not isinstance(data, Mapping):
        return _record(UNAVAILABLE, "dcgmi diag printed no JSON object")
    root = next((data[key] for key in DCGM_ROOTS if isinstance(data.get(key), Mapping)), None)
    if root is None:
        return _record(UNAVAILABLE, f"dcgmi diag's JSON has none of {', '.join(DCGM_ROOTS)}")
    if root.get("runtime_error"):
        return _record(UNAVAILABLE, f"dcgmi diag: {str(root['runtime_error'])[:MESSAGE_CHARS]}")
    tests: list[dict[str, Any]] = []
    for entry in _dcgm_tests(root):
        if len(tests) >= MAX_DCGM_RESULTS:
            break
        tests.append(entry)
    metadata = data.get("metadata")
    version = (metadata.get("version") if isinstance(metadata, Mapping) else None) or root.get("version")
    return _record(READ, None, version=str(version)[:32] if version else None, tests=tests)


def read_dcgm(
    runner: Runner = run_bounded,
    which: Callable[[str], str | None] = shutil.which,
    *,
    timeout_s: float = DCGM_SECONDS,
    max_bytes: int = DCGM_BYTES,
) -> dict[str, Any]:
    """DCGM's level-1 diagnostic (`dcgmi diag -r 1 -j`: deployment checks, seconds) where dcgmi is on PATH."""
    if not _on_linux():
        return _record(UNAVAILABLE, NOT_LINUX)
    dcgmi = which("dcgmi")
    if dcgmi is None:
        return _record(ABSENT, "dcgmi is not on PATH")
    out = runner((dcgmi, *DCGM_COMMAND), timeout_s, max_bytes)
    command = "dcgmi " + " ".join(DCGM_COMMAND)
    if out.error:
        return _record(UNAVAILABLE, f"{command}: {out.error}")
    if out.timed_out:
        return _record(UNAVAILABLE, f"{command} did not finish in {timeout_s:g} s")
    if out.truncated:
        return _record(UNAVAILABLE, f"{command} printed more than {max_bytes} bytes")
    data = _json_object(out.stdout.decode("utf-8", "replace"))
    if data is None:
        said = out.stdout.decode("utf-8", "replace").strip().splitlines()
        why = said[0][:MESSAGE_CHARS] if said else out.reason()
        return _record(UNAVAILABLE, f"{command} printed no JSON: {why}")
    return {**parse_dcgm(data), "returncode": out.returncode}


# ---- all four ----------------------------------------------------------------------------------------------------


def read_node_records(
    root: str | os.PathLike[str] = "/",
    runner: Runner = run_bounded,
    which: Callable[[str], str | None] = shutil.which,
    *,
    dcgm: bool = True,
) -> dict[str, Any]:
    """{"xid", "aer", "ib", "dcgm"}: each record as its reader returns it (dcgm absent when not asked for)."""
    return {
        "xid": read_xids(root, runner),
        "aer": read_aer(root),
        "ib": read_ib(root),
        "dcgm": read_dcgm(runner, which) if dcgm else _record(ABSENT, "not run (dcgm=False)"),
    }

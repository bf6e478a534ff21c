"""Bounded reads, the one way the node's fault records are read (`ds_doctor.hardware.records`): a file at most a
few bytes and never waited on (`read_text`), a command at most so many bytes and seconds, killed with whatever it
started past either (`run_bounded`). A kernel log of a gigabyte, a binary file, a FIFO where a sysfs file should be,
a command that never ends or never stops printing are ordinary input here: each is an answer, never a raise nor a
hang."""

from __future__ import annotations

import dataclasses
import os
import re
import selectors
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: Bounds on what a reader takes in: a sysfs attribute is a page (4 KiB); 64 KiB is already hostile.
FILE_BYTES = 64 << 10
#: A command's stderr is kept for its first line of reason only.
STDERR_BYTES = 4 << 10
#: Reading stops (and the command is killed) past this many times the bytes kept: `yes` is not a kernel log.
READ_FACTOR = 4
MESSAGE_CHARS = 300
MAX_PCI_DEVICES = 4096
#: A PCI device's name in sysfs and in /proc/driver/nvidia/gpus: domain, bus, device, function.
BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")

NOT_LINUX = "not Linux: the kernel log, sysfs and DCGM are read on Linux only"


def reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def is_number(text: str) -> bool:
    """ASCII digits only (`str.isdigit` also takes `²`, which `int` refuses)."""
    return text.isascii() and text.isdigit() and len(text) <= 20


def on_linux() -> bool:
    return sys.platform.startswith("linux")


# ---- files -------------------------------------------------------------------------------------------------------


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


def attribute(path: Path, limit: int = FILE_BYTES) -> tuple[str | None, str | None]:
    """(the file's first line, None) or (None, why not)."""
    try:
        text = read_text(path, limit)
    except OSError as exc:
        return None, reason(exc)
    return text.strip().splitlines()[0] if text.strip() else "", None


def listdir(path: Path, limit: int) -> list[str]:
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


# ---- commands ----------------------------------------------------------------------------------------------------


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
        return CommandOutput(None, error=f"{argv[0] if argv else '?'}: {reason(exc)}")
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

"""torch's build lock in an op's folder: who holds it, whether the holder is alive, and clearing one left behind.

torch's JIT (`torch.utils.cpp_extension._jit_compile`) takes a build folder by creating `<folder>/lock` with
`O_CREAT | O_EXCL` (`torch.utils.file_baton.FileBaton`) and keeps that file open until it removes it after the
build. A builder that dies first (SIGKILL, the OOM killer, a timeout's kill, SIGTERM with Python's default handler)
leaves the file, and every later build or load of that op waits for it to vanish, forever, saying nothing ("Waiting
for lock" hangs). Because the holder keeps the file open, the kernel itself says whether it lives: a process on this
host that holds the lock has it among its open files (`/proc/<pid>/fd`). ds-doctor's own builder also leaves a
record beside the lock (`BUILDER_RECORD`: pid, host, start) so that a lock on a folder shared between hosts (NFS,
Lustre) names the host and process that took it.

A lock is judged, never guessed at: held (a live process holds it: wait, naming it), stale (no process holds it
and the holder could only have been on this host, or ds-doctor's record names a holder on this host that is gone:
remove it, saying so), or unknown (the folder is on a network filesystem or the lock belongs to another user, whose
processes this one cannot see: wait, naming the file and what to delete)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

#: torch's lock file in an op's build folder
LOCK = "lock"
#: ds-doctor's record of its own builder, beside torch's lock while it builds or loads the op
BUILDER_RECORD = "ds-doctor-builder.json"
#: filesystems whose folders other hosts may share: a lock there may be held by a process this host cannot see
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "lustre",
        "gpfs",
        "beegfs",
        "cifs",
        "smb3",
        "smbfs",
        "ceph",
        "glusterfs",
        "9p",
        "afs",
        "wekafs",
        "orangefs",
        "pvfs2",
        "panfs",
        "virtiofs",
    }
)
#: on a shared filesystem, a lock with no live holder here and no ds-doctor record is taken as left behind once
#: nothing in its folder has changed for this long (a compile writes its object files as it goes)
QUIET_ON_SHARED_S = 900.0


@dataclasses.dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    command: str = ""

    def words(self) -> str:
        what = f" ({self.command})" if self.command else ""
        return f"pid {self.pid}{what} on {self.host}"


@dataclasses.dataclass(frozen=True)
class LockState:
    """What is known of one op folder's lock. `state`: free, held, stale or unknown."""

    path: Path
    state: str
    holders: tuple[Holder, ...] = ()
    age_s: float = 0.0
    why: str = ""

    def holder_words(self) -> str:
        """Who holds it, in a few words."""
        if self.holders:
            return ", ".join(h.words() for h in self.holders)
        return f"the build lock {self.path}"

    def waiting_line(self, op: str) -> str:
        """The line said while a build waits on this lock."""
        if self.state == "held":
            who = ", ".join(h.words() for h in self.holders)
            return (
                f"{op}: waiting for {who}, which holds the build lock {self.path} (taken {_ago(self.age_s)})"
            )
        return (
            f"{op}: waiting on the build lock {self.path} (taken {_ago(self.age_s)}): {self.why}; if no build of "
            f"{op} runs anywhere, delete that file"
        )


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    return f"{seconds / 60:.0f} min ago"


def filesystem_type(path: Path) -> str:
    """The type of the filesystem `path` is on (from /proc/self/mountinfo), or "" where that cannot be read."""
    target = os.path.realpath(path)
    best, kind = "", ""
    with contextlib.suppress(OSError):
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                mount = fields[4].replace("\\040", " ")
                after = line.split(" - ", 1)[1].split()
                inside = target == mount or target.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best) and after:
                    best, kind = mount, after[0]
    return kind


def on_shared_filesystem(path: Path) -> bool:
    kind = filesystem_type(path)
    return kind in NETWORK_FILESYSTEMS or kind.startswith("fuse.")


def _pids() -> Iterator[int]:
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                yield int(name)


def _command(pid: int) -> str:
    with contextlib.suppress(OSError):
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()[:400]
        words = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
        return words if len(words) <= 80 else words[:77] + "..."
    return ""


def local_holders(lock: Path) -> tuple[tuple[Holder, ...], bool]:
    """The processes on this host with `lock` open, and whether every process's open files could be read (a user
    who is not root cannot read another user's)."""
    try:
        wanted = os.stat(lock)
    except OSError:
        return (), True
    host = socket.gethostname()
    found: list[Holder] = []
    complete = True
    for pid in _pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except PermissionError:
            complete = False
            continue
        except OSError:  # gone meanwhile
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                held = os.stat(f"/proc/{pid}/fd/{fd}")
                if (held.st_dev, held.st_ino) == (wanted.st_dev, wanted.st_ino):
                    found.append(Holder(pid, host, _command(pid)))
                    break
    return tuple(found), complete


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return ""


def write_record(folder: Path) -> Path:
    """ds-doctor's record of this process as the op's builder, beside torch's lock: what a later run reads when
    the lock outlives it on a folder other hosts share."""
    record = folder / BUILDER_RECORD
    text = json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "boot": _boot_id(), "started": time.time()}
    )
    with contextlib.suppress(OSError):
        record.write_text(text + "\n", encoding="utf-8")
    return record


def read_record(folder: Path) -> dict[str, object] | None:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((folder / BUILDER_RECORD).read_text(encoding="utf-8")[:4096])
        if isinstance(data, dict) and isinstance(data.get("pid"), int) and isinstance(data.get("host"), str):
            return data
    return None


def _alive_here(record: dict[str, object]) -> bool:
    """Whether the process a record names on this host still runs (the same boot: a pid is reused after a reboot)."""
    if record.get("boot") and record.get("boot") != _boot_id():
        return False
    pid = record["pid"]
    assert isinstance(pid, int)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """A process that ended and was never reaped (its parent a subreaper that does not wait, as a run's doctor is
    for orphans): gone, though `kill(pid, 0)` still finds it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


def _latest_change(folder: Path) -> float:
    latest = 0.0
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                latest = max(latest, entry.stat(follow_symlinks=False).st_mtime)
    return latest


def _without_local_holder(lock: Path, age: float, complete: bool) -> LockState:
    """A lock no process on this host has open: stale where its holder could only have been here."""
    folder = lock.parent
    record = read_record(folder)
    here = socket.gethostname()
    ours = lock.stat().st_uid == os.getuid() if lock.exists() else True
    if record is not None and record.get("host") == here:
        pid = int(str(record["pid"]))
        took_it = float(str(record.get("started", 0.0))) <= time.time() - age + 2.0
        if took_it and _alive_here(record):  # its builder, alive, between two steps of the build
            return LockState(lock, "held", (Holder(pid, here, _command(pid)),), age)
        if took_it:
            return LockState(lock, "stale", age_s=age, why=f"its builder (pid {pid} on {here}) is gone")
    if on_shared_filesystem(folder):
        if record is not None:
            return LockState(
                lock,
                "unknown",
                (Holder(int(str(record["pid"])), str(record["host"])),),
                age,
                f"ds-doctor's build on {record['host']} (pid {record['pid']}) took it, on a shared filesystem",
            )
        quiet = time.time() - max(_latest_change(folder), lock.stat().st_mtime if lock.exists() else 0.0)
        if quiet >= QUIET_ON_SHARED_S:
            return LockState(
                lock,
                "stale",
                age_s=age,
                why=f"no process here holds it and its folder is unchanged for {quiet:.0f} s",
            )
        return LockState(
            lock,
            "unknown",
            age_s=age,
            why=f"no process on this host holds it; the folder is on {filesystem_type(folder)}, which another host may "
            "be building in",
        )
    if not complete and not ours:
        return LockState(
            lock,
            "unknown",
            age_s=age,
            why="another user owns it, and this user cannot see that user's processes",
        )
    return LockState(lock, "stale", age_s=age, why="no process on this host holds it (its builder is gone)")


def judge(folder: Path) -> LockState:
    """The state of torch's lock in an op's build `folder`."""
    lock = folder / LOCK
    try:
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return LockState(lock, "free")
    holders, complete = local_holders(lock)
    if holders:
        return LockState(lock, "held", holders, age)
    try:
        return _without_local_holder(lock, age, complete)
    except OSError:  # removed meanwhile
        return LockState(lock, "free")


def clear_stale(state: LockState) -> bool:
    """Remove a stale lock, unless another builder took the folder since it was judged (the lock is renamed aside
    first and put back where it is not the file judged). Whether it was removed."""
    lock = state.path
    aside = lock.with_name(f"{LOCK}.stale-{os.getpid()}")
    try:
        judged = os.stat(lock)
        os.rename(lock, aside)
    except OSError:
        return False
    moved = os.stat(aside)
    if (moved.st_dev, moved.st_ino) != (judged.st_dev, judged.st_ino) or local_holders(aside)[0]:
        with contextlib.suppress(
            OSError
        ):  # someone else's live lock: back in place unless a new one is there
            os.link(aside, lock)
        with contextlib.suppress(OSError):
            os.unlink(aside)
        return False
    with contextlib.suppress(OSError):
        os.unlink(aside)
    with contextlib.suppress(OSError):
        (lock.parent / BUILDER_RECORD).unlink()
    return True


def cleared_line(op: str, state: LockState) -> str:
    return f"{op}: removed a build lock left behind ({state.path}, taken {_ago(state.age_s)}: {state.why})"


def heal_folder(folder: Path, op: str) -> str | None:
    """Clear `folder`'s lock if it is stale; the line that says so, or None."""
    state = judge(folder)
    if state.state == "stale" and clear_stale(state):
        return cleared_line(op, state)
    return None


def heal_root(root: Path) -> list[str]:
    """Every stale lock in `root`'s op folders cleared, for a process about to load ops from `root` in itself (torch's
    own wait on a lock whose builder was killed has no bound); the lines that say what was removed."""
    try:
        folders = sorted(lock.parent for lock in root.glob(f"*/{LOCK}"))
    except OSError:
        return []
    return [line for folder in folders if (line := heal_folder(folder, folder.name)) is not None]


def heal_op(op: str, environ: Mapping[str, str]) -> str | None:
    """For a rank about to load `op` from the run's folder (`TORCH_EXTENSIONS_DIR`): a lock that a killed launch's
    rank left there cleared first, so a relaunch does not wait on it; the line that says so, or None."""
    root = environ.get("TORCH_EXTENSIONS_DIR")
    if not root or not (Path(root) / op / LOCK).exists():
        return None
    return heal_folder(Path(root) / op, op)

"""File writes: atomic for files (a reader never sees half a file), in place for what is not a file (`/dev/null`, a
terminal, a pipe's reader), and never a replacement of anything but a regular file."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

#: The longest path component built from data (a host name in a report's file name)
COMPONENT_CHARS = 64


def safe_component(text: object, default: str = "unknown", limit: int = COMPONENT_CHARS) -> str:
    """One safe path component from data (a host name read from a report, say): letters, digits, `.`, `_`, `-`;
    no separator, no `..`, no leading dot, at most `limit` characters. Nothing built from data leaves the folder the
    user named."""
    component = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text)[: limit * 4])[:limit].strip("._-")
    return component or default


#: The errno values that are the machine's, not ds-doctor's: a full disk, a quota, a failing device, a read-only
#: mount, a file over the size limit. Where one stops a write, ds-doctor says so in one line (exit 2), never as its bug.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG})

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def exclusive_temp(path: Path) -> tuple[int, Path]:
    """A new, empty file beside `path` under a name nobody can predict, created exclusively and without following a
    link (O_CREAT|O_EXCL|O_NOFOLLOW): a link or file planted at any name ds-doctor might pick is never written
    through, as root or not. Mode 0666 less the umask, as `open("w")` gives."""
    # the random part and the dots must fit in a name of 255 bytes (UTF-8: a character may take 4)
    stem = path.name.encode("utf-8", "surrogateescape")[:200].decode("utf-8", "ignore")
    for _ in range(100):
        tmp = path.with_name(f".{stem}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, _CREATE, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name beside it", str(path))


@contextlib.contextmanager
def replacing(path: Path, *, fsync: bool = True, exclusive: bool = False) -> Iterator[IO[str]]:
    """A text handle whose content replaces `path` when the block ends (renamed over it: a reader never sees half a
    file, and a link at `path` is replaced, never followed); with `exclusive`, hard-linked to `path` instead, which
    fails with FileExistsError where `path` exists (two writers never replace each other's file). An OS error without
    a file name (a write on a full disk) is raised naming `path`."""
    fd, tmp = exclusive_temp(path)
    try:
        # text from data may hold lone surrogates (a non-UTF-8 byte in a path or variable): shown escaped, never lost
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
            yield handle
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
    finally:
        tmp.unlink(missing_ok=True)


def fresh_file(path: Path) -> IO[str]:
    """A new, empty text file put at `path` at once (created beside it exclusively, then renamed over whatever was
    there), open for writing: a log that grows while a job runs. A link planted at `path` is replaced, never
    followed or truncated."""
    fd, tmp = exclusive_temp(path)
    try:
        os.replace(tmp, path)
    except OSError:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")


def write_atomic(path: Path, text: str, *, fsync: bool = True, exclusive: bool = False) -> None:
    """Write `text` to a temp file beside `path`, then rename over it (fsync off for frequent heartbeats); see
    `replacing` for `exclusive` and what is never followed."""
    with replacing(path, fsync=fsync, exclusive=exclusive) as handle:
        handle.write(text)


class CannotWrite(Exception):
    """An output the machine would not let ds-doctor write (a full or failing disk), with what to do: one line, exit
    2."""


def disk_failure(exc: BaseException) -> str | None:
    """One line for an OS error the machine caused (full disk, quota, I/O error, read-only mount), naming the path;
    None for any other."""
    if not isinstance(exc, OSError) or exc.errno not in DISK_ERRNOS:
        return None
    where = f"cannot write {exc.filename}" if exc.filename is not None else "cannot write"
    return f"{where}: {exc.strerror or os.strerror(exc.errno or 0)}"


class OutputError(Exception):
    """An output path that cannot be written as asked: one line naming it and why."""


def output_kind(path: Path) -> str:
    """What writing to `path` would do: "file" (absent, or a regular file, through symlinks: replaced atomically),
    "stream" (a character device or a FIFO, written in place), or the reason it is refused."""
    if (way := foreign_on_the_way(path)) is not None:
        return way
    if foreign_link(path) is not None:
        return "file"  # another user's link: replaced, never followed (`write_output`)
    try:
        mode = os.stat(path).st_mode  # follows symlinks: /proc/self/fd/1 is the stream it points at
    except FileNotFoundError:
        return "file"  # absent, or a dangling link: the file it names is created
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "stream"
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISBLK(mode):
        return "is a block device (a disk): ds-doctor never writes there"
    if stat.S_ISSOCK(mode):
        return "is a socket"
    return "is not a file"


#: A chain of links longer than this is left to the kernel, which refuses it (ELOOP) when the file is opened
MAX_LINK_HOPS = 40


def _trusted(uid: int) -> bool:
    """A link's owner whose links are followed: this process's user, or root (whose links are the system's:
    `/dev/stdout`, `/var/run`)."""
    return uid in (os.geteuid(), 0)


def foreign_in_path(path: Path) -> tuple[str, int] | None:
    """The first symbolic link on the way to `path` (a folder on the way, the last component, or any link a link
    leads to) that a user other than this one or root owns, with its owner; None where there is none. ds-doctor,
    often root, never follows such a link to write: its owner would choose where root writes (the kernel's
    protected-symlinks rule covers only sticky world-writable folders, and only where it is switched on)."""
    parts = list(Path(os.path.abspath(path)).parts)
    current, pending, hops = parts[0], parts[1:], 0
    while pending:
        candidate = os.path.join(current, pending.pop(0))
        try:
            info = os.lstat(candidate)
        except OSError:
            return None  # absent from here on: what ds-doctor creates there is its own
        if not stat.S_ISLNK(info.st_mode):
            current = candidate
            continue
        if not _trusted(info.st_uid):
            return candidate, info.st_uid
        hops += 1
        try:
            target = os.readlink(candidate)
        except OSError:
            return None
        if hops > MAX_LINK_HOPS:
            return None
        target_parts = list(Path(target).parts)
        if os.path.isabs(target):
            current, target_parts = target_parts[0], target_parts[1:]
        pending = target_parts + pending
    return None


def entries_below(
    root: Path, max_depth: int, unlisted: Callable[[Path, OSError], None] | None = None
) -> Iterator[os.DirEntry[str]]:
    """Every entry below `root`, folders too (each yielded before what it holds), walked without recursion and never
    into a link; a folder `max_depth` levels down is yielded but not entered; a folder that cannot be listed goes to
    `unlisted` with its error. A folder handed over as data (a run folder, a fleet's reports) may be a thousand
    levels deep or hold a million files: the caller counts what it takes and stops."""
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            with os.scandir(folder) as listing:
                for entry in listing:
                    yield entry
                    if depth < max_depth and entry.is_dir(follow_symlinks=False):
                        stack.append((Path(entry.path), depth + 1))
        except OSError as exc:
            if unlisted is not None:
                unlisted(folder, exc)


def foreign_link(path: Path) -> int | None:
    """The owner of `path` where it is itself a symbolic link some other user owns (not this process's user, not
    root); else None. Such a link at an output's name is replaced, never followed (`write_output`)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_uid if stat.S_ISLNK(info.st_mode) and not _trusted(info.st_uid) else None


def foreign_on_the_way(path: Path) -> str | None:
    """Why writing at `path` would follow another user's link before its last component (`foreign_in_path`), or
    None: a folder on the way, or a link that a link at `path` leads through."""
    found = foreign_in_path(path)
    if found is None or found[0] == os.path.abspath(path):
        return None
    where, owner = found
    return (
        f"leads through {where}, a link owned by another user (uid {owner}), which ds-doctor does not follow"
    )


def write_output(path: Path, text: str) -> None:
    """A user-named output: a regular file (or a link of this user's to one) is replaced atomically, the link kept;
    a link someone else owns is never followed (`foreign_link`): it is itself replaced by the file, or the write is
    refused where its folder does not allow that; a character device or a FIFO is written in place, never replaced
    (as root, replacing `/dev/null` would destroy it); a FIFO with no reader is refused rather than waited on.
    Anything else raises OutputError."""
    kind = output_kind(
        path
    )  # another user's link on the way is refused there, at the last component a "file"
    if kind == "file":
        owner = foreign_link(path)
        if owner is None:
            write_atomic(Path(os.path.realpath(path)), text)
            return
        try:
            write_atomic(path, text)  # renamed over the link: nothing it points at is touched
        except PermissionError:
            raise OutputError(
                f"{path} is a link owned by another user (uid {owner}): ds-doctor does not write through it, "
                "and this folder does not let it be replaced; name another output"
            ) from None
        return
    if kind != "stream":
        raise OutputError(f"{path} {kind}")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        why = "a FIFO nobody reads" if exc.errno == errno.ENXIO else (exc.strerror or str(exc))
        raise OutputError(f"cannot write {path}: {why}") from None
    try:
        os.set_blocking(fd, True)
        data = text.encode("utf-8", errors="backslashreplace")
        while data:
            data = data[os.write(fd, data) :]
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


TAIL_LINES = 40


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of a log (at most 4000 characters); "" when there is none."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])[-4000:]


def untrusted_folder(path: Path) -> str | None:
    """Why `path` cannot be trusted to hold what ds-doctor runs or believes (as root, on every rank), or None: it and
    every folder above it must be a folder owned by the user running ds-doctor or by root, writable by nobody else (a
    folder others may write is fine only with the sticky bit, as /tmp: they cannot rename what is not theirs); `path`
    itself must not be a link."""
    me = os.geteuid()
    try:
        here = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be examined ({exc.strerror})"
    if not stat.S_ISDIR(here.st_mode):
        return f"{path} is not a folder (a link or a file)"
    for folder in (path, *path.parents):
        info = here if folder == path else os.stat(folder)
        if info.st_uid not in (me, 0):
            return f"{folder} belongs to uid {info.st_uid}, not to this user ({me}) or root"
        writable_by_others = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable_by_others and (folder == path or not info.st_mode & stat.S_ISVTX):
            return f"{folder} is writable by others (mode {stat.filemode(info.st_mode)})"
    return None

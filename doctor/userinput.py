"""What a user hands ds-doctor (a config, a log, a report, a dump), read with bounds.

ds-doctor runs as root on cluster nodes, and its inputs are what strangers attach to tickets, so every file a user
names is read here: a size cap per kind, special files handled (a FIFO or a `<(cmd)` path such as /dev/fd/63 is
read as a stream up to its cap; /dev/zero or any endless stream stops at the cap with an error; a directory, a
socket, a block device, a missing file, a symlink loop or a permission problem is one line each), compressed logs
(.gz, .bz2, .xz) through a decompressor that stops at its cap, and stdin (`triage -`) the same way. JSON is read
with a depth bound and YAML with its aliases expanded against a node budget (an alias bomb is refused).

Every error is a `UserInputError`: a `click.UsageError`, so the CLI prints it as one line with exit code 2 wherever
it comes from, and a `ValueError`, as the config errors it underlies always were. Callers pass their own subclass
(`ConfigError`, `AccelerateConfigError`, `InputError`) to keep their messages' type.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import io
import json
import os
import select
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, cast

import click

MiB = 2**20
# a DeepSpeed JSON or Accelerate YAML (real ones are a few KiB; the report copies it)
MAX_CONFIG_BYTES = 1 * MiB
MAX_LOG_BYTES = 32 * MiB  # triage reads a longer log from its tail
# a pipe, stdin or a decompressed log is read this far at most (its tail is kept)
MAX_STREAM_BYTES = 128 * MiB
MAX_REPORT_BYTES = 64 * MiB  # a report JSON or a run manifest
MAX_DUMP_BYTES = 64 * MiB  # one Flight Recorder dump; a bigger file in a dump folder is skipped with a line
MAX_DEPTH = 64  # JSON nesting (a DeepSpeed config has 4 levels, a report about 8)
MAX_JSON_NODES = 5_000_000
MAX_YAML_NODES = 100_000  # the YAML document with every alias expanded
# the most ranks a job is believed to have (1,048,576, as --world-size): checked before sizing
MAX_RANKS = 1 << 20
CHUNK = MiB


class UserInputError(click.UsageError, ValueError):
    """Input ds-doctor cannot use; its message is the one line the CLI prints (exit code 2)."""


Error = Callable[[str], Exception]


def size_text(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB".replace(".0 MiB", " MiB")
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} bytes"


def short(value: Any, chars: int = 60) -> str:
    """A value as a message shows it: a repr two levels deep, a few items each, cut (a message stays one short line
    whatever the input holds, and costs nothing however much that is)."""
    import reprlib

    if type(value) is int and value.bit_length() > 128:
        return f"an integer of {value.bit_length():,} bits"
    brief = reprlib.Repr()
    brief.maxlevel, brief.maxstring, brief.maxother = 2, chars, chars
    brief.maxlist = brief.maxtuple = brief.maxdict = brief.maxset = 4
    text = brief.repr(value)
    return text if len(text) <= chars else f"{text[: chars - 1]}…"


@dataclasses.dataclass(frozen=True)
class Input:
    """The bytes read of one input, and what is known of where they came from."""

    name: str  # as the user gave it (`stdin` for -)
    data: bytes
    regular: bool  # a regular file, which a child process can read again by its path; a pipe or device cannot
    note: str | None = None  # what was left out, for the caller to say ("read the last 32 MiB of 1.2 GiB")

    def text(self, error: Error = UserInputError) -> str:
        """The bytes as UTF-8; any other byte is one line naming where it is."""
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = self.data.count(b"\n", 0, exc.start) + 1
            raise error(
                f"{self.name}: not UTF-8 text (byte {self.data[exc.start]:#04x} at line {line}, offset "
                f"{exc.start})"
            ) from None


def _stat(path: Path, name: str, error: Error) -> os.stat_result:
    try:
        info = os.stat(path)  # follows symlinks: a loop is ELOOP here
    except FileNotFoundError:
        raise error(f"{name}: no such file") from None
    except OSError as exc:
        raise error(f"{name}: {exc.strerror or exc}") from None
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(info.st_mode):
            raise error(f"{name}: is {what}, not a file")
    return info


@dataclasses.dataclass
class _Opened:
    handle: BinaryIO
    name: str
    regular: bool  # a regular file named by a path (a child process can read it again)
    size: int | None  # where it is seekable: its size
    owned: bool = True  # stdin is read, not closed


def _open(source: str | Path, error: Error) -> _Opened:
    """The input opened (not resolved first: /dev/fd/63 names a pipe only as given)."""
    if str(source) == "-":
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:
            raise error("stdin: not readable")
        try:  # `triage - < file`: a file all the same, read from its tail
            info = os.fstat(stream.fileno())
            size = info.st_size - stream.tell() if stat.S_ISREG(info.st_mode) else None
        except (OSError, ValueError, io.UnsupportedOperation):
            size = None
        return _Opened(stream, "stdin", False, size, owned=False)
    name = str(source)
    path = Path(source).expanduser()
    fifo = stat.S_ISFIFO(_stat(path, name, error).st_mode)
    try:
        # a FIFO opened for reading blocks until a writer comes: opened without blocking, its first bytes waited for
        fd = os.open(
            path,
            os.O_RDONLY
            | getattr(os, "O_CLOEXEC", 0)
            | getattr(os, "O_NOCTTY", 0)
            | (getattr(os, "O_NONBLOCK", 0) if fifo else 0),
        )
    except OSError as exc:
        raise error(f"{name}: {exc.strerror or exc}") from None
    if fifo:
        _first_bytes(fd, name, error)
    info = os.fstat(fd)  # what was opened, not what the name pointed at a moment ago
    regular = stat.S_ISREG(info.st_mode)
    return _Opened(open(fd, "rb", buffering=CHUNK), name, regular, info.st_size if regular else None)


#: How long a FIFO or pipe may stay silent before its first byte (or its writer's close): `<(cmd)` gets this long
FIFO_WAIT_S = 60.0


def _first_bytes(fd: int, name: str, error: Error) -> None:
    """Wait (bounded) until a FIFO has bytes to read or its writer closed it, then make it blocking again: a FIFO
    nobody opens for writing is one line, never a hang."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if not poller.poll(int(FIFO_WAIT_S * 1000)):
        os.close(fd)
        raise error(f"{name}: a FIFO nothing wrote to within {FIFO_WAIT_S:g} s (no writer?)")
    os.set_blocking(fd, True)


def _read_capped(read: Callable[[int], bytes], cap: int, keep: int) -> tuple[bytes, int]:
    """Read until the end or until more than `cap` bytes came (then stop); the last `keep` bytes and the count.
    Whole chunks are let go as they fall out of the last `keep`: memory stays about `keep` plus a chunk."""
    chunks: collections.deque[bytes] = collections.deque()
    held = total = 0
    while total <= cap and (block := read(min(CHUNK, cap + 1 - total))):
        total += len(block)
        chunks.append(block)
        held += len(block)
        while held - len(chunks[0]) >= keep:
            held -= len(chunks.popleft())
    if held > keep:
        chunks[0] = chunks[0][held - keep :]
    return b"".join(chunks), total


def _too_much(name: str, cap: int, regular: bool, what: str = "") -> str:
    endless = "" if regular else " (an endless stream?)"
    return (
        f"{name}: more than {size_text(cap)}{what}{endless}: ds-doctor reads at most {size_text(cap)} of it"
    )


def read_file(source: str | Path, *, limit: int, error: Error = UserInputError, kind: str = "file") -> Input:
    """A whole input of at most `limit` bytes (a config, a report): a bigger one is an error, a stream is read up to
    the limit."""
    opened = _open(source, error)
    name, regular, size = opened.name, opened.regular, opened.size
    with contextlib.ExitStack() as stack:
        handle = stack.enter_context(opened.handle) if opened.owned else opened.handle
        if size is not None and size > limit:
            raise error(f"{name}: {size_text(size)}, more than the {size_text(limit)} a {kind} may have")
        try:
            data, total = _read_capped(handle.read, limit, limit)
        except OSError as exc:
            raise error(f"{name}: {exc.strerror or exc}") from None
    if total > limit:
        raise error(_too_much(name, limit, regular))
    return Input(name, data, regular)


_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz"}


def _compression(head: bytes) -> str | None:
    if head.startswith(_ZIP):
        return "zip"
    return next((kind for magic, kind in _MAGIC.items() if head.startswith(magic)), None)


_ZIP = b"PK\x03\x04"  # a zip archive, as tickets attach logs


def _zip_member(handle: BinaryIO, name: str, limit: int, error: Error) -> tuple[bytes, int, str]:
    """The largest file of a zip archive (read whole up to MAX_STREAM_BYTES, its member likewise, its tail kept):
    (its last `limit` bytes, its size, which member of how many)."""
    import zipfile

    raw, total = _read_capped(handle.read, MAX_STREAM_BYTES, MAX_STREAM_BYTES)
    if total > MAX_STREAM_BYTES:
        raise error(
            _too_much(name, MAX_STREAM_BYTES, True, " of zip archive") + "; unzip it and give the log"
        )
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
        members = [m for m in archive.infolist() if not m.is_dir()]
        if not members:
            raise error(f"{name}: a zip archive with no file in it")
        member = max(members, key=lambda m: m.file_size)
        with archive.open(member) as inner:
            data, size = _read_capped(inner.read, MAX_STREAM_BYTES, limit)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, RuntimeError, NotImplementedError, EOFError) as exc:
        raise error(f"{name}: cannot read the zip archive: {exc}"[:300]) from None
    if size > MAX_STREAM_BYTES:
        raise error(
            _too_much(name, MAX_STREAM_BYTES, True, " of a zip member") + "; unzip it and give the log"
        )
    return data, size, f"{member.filename[:200]}, the largest of {len(members)} file(s) in the zip archive"


def _decompressed(handle: BinaryIO, kind: str) -> BinaryIO:
    import bz2
    import gzip
    import lzma

    if kind == "gzip":
        return cast(BinaryIO, gzip.GzipFile(fileobj=handle, mode="rb"))
    return cast(BinaryIO, bz2.BZ2File(handle, "rb") if kind == "bz2" else lzma.LZMAFile(handle, "rb"))


def utf16(data: bytes) -> str | None:
    """The UTF-16 codec of `data` (what PowerShell's `>` writes: UTF-16LE with a byte-order mark), by its BOM or, for
    a tail read past the BOM, by its NUL bytes (every other byte of ASCII text in UTF-16); None for anything else."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    sample = data[:4096]
    if len(sample) >= 8:
        odd, even = sample[1::2].count(0), sample[0::2].count(0)
        if odd > 0.9 * len(sample) // 2 and even < 0.1 * len(sample) // 2:
            return "utf-16-le"
        if even > 0.9 * len(sample) // 2 and odd < 0.1 * len(sample) // 2:
            return "utf-16-be"
    return None


def _from_next_line(data: bytes, codec: str | None) -> bytes:
    if codec in ("utf-16", "utf-16-le"):
        start = data[: 64 * 1024].find(b"\n\x00", len(data) % 2)  # at a character boundary of the tail's end
        while start != -1 and (len(data) - start) % 2:
            start = data[: 64 * 1024].find(b"\n\x00", start + 1)
        return data[start + 2 :] if start != -1 else data
    return data[data.index(b"\n") + 1 :] if b"\n" in data[: 64 * 1024] else data


def log_text(data: bytes) -> str:
    """A log's bytes as text: UTF-16 by its BOM or its shape, UTF-8 (a BOM dropped) otherwise, bad bytes replaced."""
    codec = utf16(data)
    if codec is not None:
        return data[: len(data) - len(data) % 2].decode(codec, errors="replace").lstrip("\ufeff")
    return data.decode("utf-8", errors="replace").lstrip("\ufeff")


def read_log(source: str, *, limit: int = MAX_LOG_BYTES, error: Error = UserInputError) -> Input:
    """A log as triage reads it: a file's last `limit` bytes (its start skipped, and said so), or the last `limit`
    of a stream or a compressed log, which is read up to MAX_STREAM_BYTES (more is an error: save it to a file)."""
    opened = _open(source, error)
    name, regular, size = opened.name, opened.regular, opened.size
    data, total, kind = _read_tail(opened, limit, error)
    if total > MAX_STREAM_BYTES and (size is None or kind is not None):
        what = f" of {kind} data decompressed" if kind else ""
        how = "decompress it and give the file" if kind else "save it to a file"
        raise error(_too_much(name, MAX_STREAM_BYTES, kind is not None, what) + f"; {how} (its tail is read)")
    note = _skipped(name, total, limit, size, kind)
    if (
        note is not None
    ):  # the first line was cut in the middle: from the next one on (UTF-16's newline is 2 bytes)
        data = _from_next_line(data, utf16(data))
    if kind is not None and kind.startswith("zip ("):
        note = "; ".join(part for part in (f"{name}: read {kind[5:-1]}", note) if part)
    if data.count(b"\x00") > len(data) // 2 and utf16(data) is None:
        raise error(f"{name}: binary data (mostly NUL bytes), not a log")
    return Input(name, data, regular and kind is None, note)


def _read_tail(opened: Any, limit: int, error: Error) -> tuple[bytes, int, str | None]:
    """(the last `limit` bytes, how many there were, the compression read through or None)."""
    kind = None
    with contextlib.ExitStack() as stack:
        handle = stack.enter_context(opened.handle) if opened.owned else opened.handle
        try:
            if not hasattr(handle, "peek"):
                handle = io.BufferedReader(handle)
            kind = _compression(handle.peek(8)[:8])
            if kind == "zip":
                data, total, member = _zip_member(handle, opened.name, limit, error)
                kind = f"zip ({member})"
            elif kind is not None:
                with _decompressed(handle, kind) as inner:
                    data, total = _read_capped(inner.read, MAX_STREAM_BYTES, limit)
            elif opened.size is not None:
                if opened.size > limit:  # from an even offset: a UTF-16 log's tail starts at a character
                    skip = opened.size - limit + (opened.size - limit) % 2
                    handle.seek(skip, os.SEEK_SET if opened.owned else os.SEEK_CUR)
                data, total = handle.read(limit), opened.size
            else:
                data, total = _read_capped(handle.read, MAX_STREAM_BYTES, limit)
        except EOFError:
            raise error(f"{opened.name}: the {kind} data ends early (a truncated file?)") from None
        # BadGzipFile, bz2's "Invalid data stream", LZMAError, a read error
        except (OSError, ValueError) as exc:
            raise error(f"{opened.name}: cannot read it: {exc}"[:300]) from None
    return data, total, kind


def _skipped(name: str, total: int, limit: int, size: int | None, kind: str | None) -> str | None:
    """The note that the start of the log was skipped, or None when all of it was read."""
    if total <= limit:
        return None
    if kind:
        whole = f"{size_text(total)} decompressed"
    else:
        whole = size_text(total) if size is not None else f"the {size_text(total)} it gave"
    return f"{name}: read the last {size_text(limit)} of {whole}: the start of the log was skipped"


def keep_copy(read: Input, suffix: str) -> Path:
    """A private regular file holding what was read: a child process can read it again by its path, where a pipe
    (`<(cmd)`, a FIFO) gives its bytes once. Removed when this process exits (the ranks are its children)."""
    fd, name = tempfile.mkstemp(prefix="ds-doctor-input-", suffix=suffix)
    with os.fdopen(fd, "wb") as handle:
        handle.write(read.data)
    atexit.register(_remove, name)
    return Path(name)


def _remove(name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name)


# ---- parsing -----------------------------------------------------------------------------------------------------


def check_tree(
    data: Any, name: str, error: Error, *, max_depth: int = MAX_DEPTH, max_nodes: int = MAX_JSON_NODES
) -> None:
    """Parsed JSON (or YAML) no deeper than `max_depth` and of at most `max_nodes` values; walked without recursion."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if depth > max_depth:
            raise error(f"{name}: nested more than {max_depth} levels deep")
        if nodes > max_nodes:
            raise error(f"{name}: more than {max_nodes:,} values")
        if isinstance(value, dict):
            stack.extend((inner, depth + 1) for inner in value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend((inner, depth + 1) for inner in value)


def parse_json(
    text: str,
    name: str,
    error: Error = UserInputError,
    *,
    label: str = "not JSON",
    max_depth: int = MAX_DEPTH,
    check: bool = True,
) -> Any:
    """JSON, its syntax errors with line and column; nesting beyond `max_depth` (or beyond what Python's parser
    can recurse into) is one line, not a RecursionError. `check=False`: the caller checks the tree (`check_tree`)
    once it has dropped what it does not read."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise error(f"{name}: nested more than {max_depth} levels deep") from None
    except json.JSONDecodeError as exc:
        raise error(f"{name}: {label}: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise error(f"{name}: {label}: {str(exc).splitlines()[0][:200]}") from None
    if check:
        check_tree(data, name, error, max_depth=max_depth)
    return data


def parse_yaml(text: str, name: str, error: Error = UserInputError) -> Any:
    """YAML through `yaml.SafeLoader`, its node graph checked before anything is built from it: every alias expanded
    it has at most MAX_YAML_NODES nodes (a 322-byte alias bomb has millions) and no alias refers to itself."""
    import yaml

    if "\x00" in text:
        raise error(
            f"{name}: a NUL byte at line {text.count(chr(10), 0, text.index(chr(0))) + 1}: not a YAML text"
        )
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, name, error)
        return loader.construct_document(node)
    except RecursionError:
        raise error(f"{name}: nested too deeply to read") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise error(f"{name}: not YAML: {exc.problem}{where}") from None
    except yaml.YAMLError as exc:
        raise error(f"{name}: not YAML: {str(exc).splitlines()[0][:200]}") from None
    finally:
        loader.dispose()


def _check_expansion(root: Any, name: str, error: Error) -> None:
    """The composed YAML graph's size with every alias expanded (sizes memoised per node, so the walk is linear)."""
    import yaml

    size: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = list(node.value) if isinstance(node, yaml.SequenceNode) else []
        if done:
            active.discard(key)
            size[key] = 1 + sum(size[id(child)] for child in children)
            if size[key] > MAX_YAML_NODES:
                raise error(
                    f"{name}: its aliases expand to more than {MAX_YAML_NODES:,} nodes (an alias bomb?)"
                )
            continue
        if key in size:
            continue
        if key in active:
            raise error(f"{name}: a YAML alias refers to a node that contains it")
        active.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in active:
                raise error(f"{name}: a YAML alias refers to a node that contains it")
            if id(child) not in size:
                stack.append((child, False))


def check_world_size(value: int, what: str, error: Error = UserInputError) -> int:
    """A world size from data or an option, before anything is sized by it."""
    if value > MAX_RANKS:
        raise error(f"{what} {value:,}: beyond the {MAX_RANKS:,} ranks ds-doctor believes a job can have")
    return value


def check_rank(value: int, what: str, error: Error = UserInputError) -> int:
    """A rank number from data (a log, a file name), before anything is sized by it."""
    if value >= MAX_RANKS:
        raise error(f"{what} {value:,}: beyond the {MAX_RANKS:,} ranks ds-doctor believes a job can have")
    return value


def check_report(data: Mapping[str, Any], name: str, error: type[Exception]) -> None:
    """`error` with one line where report-shaped data is of a newer schema, or not valid against its own."""
    import jsonschema

    from ds_doctor.reports.model import SCHEMA_VERSION, validate

    version = data.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise error(f"{name}: schema version {version} is newer than this ds-doctor reads ({SCHEMA_VERSION})")
    try:
        validate(data)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "top level"
        raise error(f"{name}: not a valid ds-doctor report at {where}: {exc.message[:200]}") from None

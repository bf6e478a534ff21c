"""Atomic file writes: a reader never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str, *, fsync: bool = True, exclusive: bool = False) -> None:
    """Write to a temp file beside `path`, then rename over it (fsync off for frequent heartbeats).

    With `exclusive`, the temp file is hard-linked to `path` instead, which fails with
    FileExistsError when `path` exists: two writers never replace each other's file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            handle.write(text)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


TAIL_LINES = 40


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of a log (at most 4000 characters); "" when there is none."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])[-4000:]

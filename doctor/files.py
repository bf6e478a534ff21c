"""Atomic file writes: a reader never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, text: str, *, fsync: bool = True) -> None:
    """Write to a temp file beside `path`, then rename over it (fsync off for frequent heartbeats)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        if fsync:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


TAIL_LINES = 40


def log_tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last lines of a log (at most 4000 characters); "" when there is none."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])[-4000:]

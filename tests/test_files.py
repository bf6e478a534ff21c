"""Atomic writes: a reader polling the file never sees half of it; an exclusive write never replaces one."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from doctor.files import log_tail, write_atomic


def test_a_concurrent_reader_never_sees_half_a_json(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    payloads = [json.dumps({"n": n, "rows": ["x" * 100] * 20_000}) for n in range(2)]  # ~2 MB each
    write_atomic(target, payloads[0])
    stop = threading.Event()
    seen: list[int] = []
    broken: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            text = target.read_text()
            try:
                seen.append(json.loads(text)["n"])
            except ValueError:
                broken.append(text[-80:])

    thread = threading.Thread(target=reader)
    thread.start()
    for round_ in range(30):
        write_atomic(target, payloads[round_ % 2], fsync=False)
    stop.set()
    thread.join()
    assert broken == [] and len(seen) > 0 and set(seen) <= {0, 1}
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temp file left behind


def test_an_exclusive_write_refuses_an_existing_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    write_atomic(target, "first", exclusive=True)
    with pytest.raises(FileExistsError):
        write_atomic(target, "second", exclusive=True)
    assert target.read_text() == "first" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "rank1.log"
    assert log_tail(log) == ""
    log.write_text("\n".join(f"line {i}" for i in range(100)))
    assert log_tail(log, lines=2) == "line 98\nline 99"

"""Atomic writes: a reader polling the file never sees half of it; an exclusive write never replaces one."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from ds_doctor.files import log_tail, write_atomic


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


def test_output_to_a_symlink_replaces_the_file_it_names_and_keeps_the_link(tmp_path: Path) -> None:
    from ds_doctor.files import write_output

    target, link = tmp_path / "real.xml", tmp_path / "link.xml"
    target.write_text("old")
    link.symlink_to(target)
    write_output(link, "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_output_to_a_fifo_is_written_in_place_and_refused_without_a_reader(tmp_path: Path) -> None:
    import os
    import stat

    from ds_doctor.files import OutputError, write_output

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="a FIFO nobody reads"):
        write_output(fifo, "nobody hears this")  # refused at once: never a hang
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    for _ in range(100):  # the reader opens the FIFO in its thread
        try:
            write_output(fifo, "metrics 1\n")
            break
        except OutputError:
            threading.Event().wait(0.05)
    reader.join(10)
    assert got == ["metrics 1\n"] and stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.parametrize("kind", ["dir", "socket"])
def test_output_to_what_is_not_a_file_is_refused(tmp_path: Path, kind: str) -> None:
    import socket

    from ds_doctor.files import OutputError, write_output

    path = tmp_path / kind
    if kind == "dir":
        path.mkdir()
    else:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        server.close()
    with pytest.raises(OutputError, match=r"is a directory|is a socket"):
        write_output(path, "x")


def test_text_with_lone_surrogates_is_written_escaped(tmp_path: Path) -> None:
    """A non-UTF-8 byte in a path or a variable reaches the Markdown as a lone surrogate: written, shown escaped."""
    target = tmp_path / "report.md"
    write_atomic(target, "path /data/caf\udce9/run")
    assert target.read_text() == "path /data/caf\\udce9/run"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("node-1.cluster", "node-1.cluster"),
        ("../../etc/passwd", "etc_passwd"),
        ("/", "unknown"),
        ("..", "unknown"),
        ("a/b\\c", "a_b_c"),
        ("", "unknown"),
        (None, "None"),
        (12, "12"),
        ("x" * 500, "x" * 64),
        ("\x00\n", "unknown"),
    ],
)
def test_a_name_built_from_data_is_one_safe_component(text: object, expected: str) -> None:
    from ds_doctor.files import safe_component

    assert safe_component(text) == expected

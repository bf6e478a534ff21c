"""What a user hands ds-doctor, read with bounds (doctor/userinput.py): special files, streams, compressed logs, size
caps, JSON depth, YAML aliases, and the reports `report`/`diff`/`--baseline` load (doctor/run/recover.py)."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import click
import pytest

from ds_doctor import userinput
from ds_doctor.run.recover import InputError, load_manifest, load_report_file
from ds_doctor.rundir import RunDir
from ds_doctor.userinput import (
    MAX_CONFIG_BYTES,
    MAX_LOG_BYTES,
    MAX_RANKS,
    Input,
    UserInputError,
    check_rank,
    check_world_size,
    keep_copy,
    parse_json,
    parse_yaml,
    read_file,
    read_log,
    short,
    size_text,
)
from tests.bounds import GENEROUS_S

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "resources" / "hostile"


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert message and "\n" not in message and len(message) < 400, message
    return message


def test_an_input_error_is_a_usage_error_and_a_value_error() -> None:
    """The CLI prints a click.UsageError as one line with exit code 2 wherever it is raised; the config errors
    built on it stay ValueErrors, as they were."""
    assert issubclass(UserInputError, click.UsageError) and issubclass(UserInputError, ValueError)
    assert issubclass(InputError, UserInputError)
    assert str(UserInputError("x: no such file")) == "x: no such file"


# ---- special files ---------------------------------------------------------------------------------------------


def test_a_fifo_is_read_as_a_stream(tmp_path: Path) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(b'{"a": 1}'))
    writer.start()
    read = read_file(fifo, limit=MAX_CONFIG_BYTES)
    writer.join(10)
    assert read.data == b'{"a": 1}' and not read.regular


def test_a_fifo_nobody_writes_is_one_line_within_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Opening a FIFO for reading waits for a writer: with none, `report`, `triage` and a config hung forever."""
    monkeypatch.setattr(userinput, "FIFO_WAIT_S", 0.5)
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(
        UserInputError, match=r"report.fifo: a FIFO nothing wrote to within 0.5 s \(no writer\?\)"
    ):
        read_file(fifo, limit=MAX_CONFIG_BYTES)
    from ds_doctor.cli import main

    assert main(["triage", str(fifo)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nothing wrote to within 0.5 s" in err, err
    assert time.monotonic() - started < GENEROUS_S  # a FIFO nobody writes: forever


def test_a_fifo_whose_writer_comes_late_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(userinput, "FIFO_WAIT_S", 10.0)
    fifo = tmp_path / "late.fifo"
    os.mkfifo(fifo)

    def late() -> None:
        time.sleep(0.5)
        fifo.write_bytes(b"late text")

    writer = threading.Thread(target=late)
    writer.start()
    assert read_file(fifo, limit=MAX_CONFIG_BYTES).data == b"late text"
    writer.join(10)


def test_process_substitution_is_read_not_no_such_file(tmp_path: Path) -> None:
    """`<(cmd)` hands the program /dev/fd/63: a pipe, whose name means nothing once resolved."""
    code = (
        "import sys; from ds_doctor.userinput import read_file, read_log; "
        "r = read_file(sys.argv[1], limit=2**20); print(r.data.decode(), r.regular); "
        "print(read_log(sys.argv[2]).data.decode())"
    )
    proc = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -c "{code}" <(printf "{{}}") <(printf "a log")'],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["{} False", "a log"]


def test_dev_zero_stops_at_the_cap() -> None:
    with pytest.raises(UserInputError) as caught:
        read_file("/dev/zero", limit=MAX_CONFIG_BYTES)
    assert "more than 1 MiB (an endless stream?)" in one_line(caught)
    start = time.monotonic()
    with pytest.raises(UserInputError) as caught:
        read_log("/dev/zero")
    # an endless stream read to its end: forever
    assert (
        "more than 128 MiB (an endless stream?)" in one_line(caught) and time.monotonic() - start < GENEROUS_S
    )


def test_what_is_not_a_file_is_one_line_each(tmp_path: Path) -> None:
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    try:
        for path, needle in (
            (tmp_path, "is a directory, not a file"),
            (tmp_path / "sock", "is a socket, not a file"),
            (tmp_path / "loop_a", "Too many levels of symbolic links"),
            (tmp_path / "absent", "no such file"),
        ):
            for read in (lambda p: read_file(p, limit=100), read_log):
                with pytest.raises(UserInputError) as caught:
                    read(str(path))
                assert needle in one_line(caught), path
    finally:
        server.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_permission_denied_is_one_line(tmp_path: Path) -> None:
    locked = tmp_path / "locked.json"
    locked.write_text("{}")
    locked.chmod(0)
    with pytest.raises(UserInputError, match="Permission denied"):
        read_file(locked, limit=100)


def test_a_file_over_the_cap_is_refused_unread_and_not_utf8_is_one_line(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as handle:
        handle.truncate(50 * 2**20)  # sparse: 50 MB that cost nothing to make
    with pytest.raises(UserInputError) as caught:
        read_file(big, limit=MAX_CONFIG_BYTES, kind="DeepSpeed config")
    assert "50 MiB, more than the 1 MiB a DeepSpeed config may have" in one_line(caught)
    with pytest.raises(UserInputError) as caught:
        Input("c.yaml", b"a: 1\nb: \xff\xfe\n", True).text()
    assert "not UTF-8 text (byte 0xff at line 2" in one_line(caught)


# ---- logs ------------------------------------------------------------------------------------------------------


def test_a_big_log_is_read_from_its_tail_and_says_so(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    with log.open("wb") as handle:
        handle.write(b"step 1 loss 0.5 and so on\n" * ((MAX_LOG_BYTES + 5 * 2**20) // 26))
        handle.write(b"RuntimeError: the end\n")
    read = read_log(str(log))
    assert read.data.endswith(b"RuntimeError: the end\n") and len(read.data) <= MAX_LOG_BYTES
    assert read.data.startswith(b"step 1 loss")  # the line the cut fell in is left out
    assert (
        read.note
        == f"{log}: read the last 32 MiB of {size_text(log.stat().st_size)}: the start of the log was skipped"
    )


@pytest.mark.parametrize(("suffix", "opener"), [(".gz", gzip.open), (".bz2", bz2.open), (".xz", lzma.open)])
def test_a_compressed_log_is_decompressed(tmp_path: Path, suffix: str, opener: object) -> None:
    log = tmp_path / f"train.log{suffix}"
    with opener(log, "wb") as handle:  # type: ignore[operator]
        handle.write(b"step 1\nRuntimeError: boom\n")
    read = read_log(str(log))
    assert read.data == b"step 1\nRuntimeError: boom\n" and read.note is None


@pytest.mark.parametrize("kind", ["bz2", "gzip"])
def test_a_decompression_bomb_stops_at_the_cap_in_bounded_memory(tmp_path: Path, kind: str) -> None:
    """HOSTILE/bomb.bz2: 785 bytes that decompress to 1 GiB of zeros; and 200 MiB of zeros gzipped here."""
    bomb = HOSTILE / "bomb.bz2"
    if kind == "gzip":
        bomb = tmp_path / "bomb.gz"
        with gzip.open(bomb, "wb", compresslevel=1) as handle:
            for _ in range(200):
                handle.write(bytes(2**20))
    tracemalloc.start()
    start = time.monotonic()
    try:
        with pytest.raises(UserInputError) as caught:
            read_log(str(bomb))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert f"more than 128 MiB of {kind} data decompressed" in one_line(caught)
    assert peak < 120 * 2**20  # the last 32 MiB kept, twice at most
    assert (
        time.monotonic() - start < GENEROUS_S
    )  # the cap never applied: a GiB decompressed, or all of a bomb


def test_a_truncated_gzip_is_one_line(tmp_path: Path) -> None:
    whole = gzip.compress(b"x" * 100_000)
    (tmp_path / "cut.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(UserInputError, match="ends early"):
        read_log(str(tmp_path / "cut.gz"))


def test_stdin_is_bounded_too() -> None:
    code = "from ds_doctor.userinput import read_log; print(len(read_log('-').data))"
    with open("/dev/zero", "rb") as zeros:
        proc = subprocess.run(
            [sys.executable, "-c", code], stdin=zeros, capture_output=True, text=True, cwd=ROOT, timeout=120
        )
    assert proc.returncode != 0 and "stdin: more than 128 MiB (an endless stream?)" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-c", code], input="a log\n", capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.stdout.strip() == "6"


def test_a_copy_of_a_stream_is_a_private_regular_file() -> None:
    path = keep_copy(Input("/dev/fd/63", b"{}", False), ".json")
    try:
        assert path.read_bytes() == b"{}" and path.suffix == ".json" and path.stat().st_mode & 0o077 == 0
    finally:
        path.unlink()
    code = (
        "from ds_doctor.userinput import Input, keep_copy; "
        "print(keep_copy(Input('/dev/fd/63', b'{}', False), '.json'))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    left = Path(proc.stdout.strip())
    # gone at exit
    assert proc.returncode == 0 and left.name.startswith("ds-doctor-input-") and not left.exists()


# ---- JSON and YAML ---------------------------------------------------------------------------------------------


def test_json_nesting_is_one_line_not_a_recursion_error() -> None:
    for depth in (65, 200_000):
        with pytest.raises(UserInputError) as caught:
            parse_json("[" * depth + "]" * depth, "deep.json")
        assert "nested more than 64 levels deep" in one_line(caught)
    with pytest.raises(UserInputError, match="not JSON: Exceeds the limit"):
        parse_json('{"a": ' + "1" * 5000 + "}", "long.json")
    assert parse_json('{"a": [1, {"b": 2}]}', "ok.json") == {"a": [1, {"b": 2}]}


def test_a_yaml_alias_bomb_is_refused() -> None:
    text = (HOSTILE / "alias_bomb.yaml").read_text()
    assert len(text) < 400
    start = time.monotonic()
    with pytest.raises(UserInputError) as caught:
        parse_yaml(text, "bomb.yaml")
    assert (
        "its aliases expand to more than 100,000 nodes" in one_line(caught)
        and time.monotonic() - start < GENEROUS_S  # expanded: 2**30 nodes and more
    )
    # a few aliases are fine
    assert parse_yaml("a: &x [1, 2]\nb: *x\n", "ok.yaml") == {"a": [1, 2], "b": [1, 2]}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("a: 1\nb: \x00\n", "a NUL byte at line 2"),
        ("a: &x [*x]\n", "a YAML alias refers to a node that contains it"),
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
        ("a: [1\n", "not YAML"),
        ("a: 1\n---\nb: 2\n", "not YAML"),
    ],
)
def test_bad_yaml_is_one_line(text: str, needle: str) -> None:
    with pytest.raises(UserInputError) as caught:
        parse_yaml(text, "c.yaml")
    assert needle in one_line(caught)


# ---- numbers from data -----------------------------------------------------------------------------------------


def test_a_rank_or_world_size_beyond_the_bound_is_one_line() -> None:
    assert (
        check_rank(MAX_RANKS - 1, "rank") == MAX_RANKS - 1 and check_world_size(MAX_RANKS, "ws") == MAX_RANKS
    )
    with pytest.raises(UserInputError, match="rank 99,999,999,999: beyond the 1,048,576 ranks"):
        check_rank(99_999_999_999, "rank")
    with pytest.raises(UserInputError, match="--world-size 1,048,577: beyond"):
        check_world_size(MAX_RANKS + 1, "--world-size")


def test_a_value_in_a_message_is_short_whatever_it_is() -> None:
    shared: list = []
    for _ in range(40):
        shared = [shared, shared]  # 2**40 leaves when walked
    start = time.monotonic()
    assert (
        len(short(shared)) <= 60
        and len(short("x" * 10**6)) <= 60
        and short(10**5000).startswith("an integer")
    )
    assert time.monotonic() - start < GENEROUS_S  # 2**40 leaves walked: forever


# ---- reports and run directories (doctor/run/recover.py) -------------------------------------------------------


def good_report() -> dict:
    from tests.test_cli import good_report_json

    return json.loads(good_report_json())


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"results": "not a list"}, "not a valid ds-doctor report at results"),
        ({"env": []}, "not a valid ds-doctor report at env"),
        ({"hardware": {"host": ["a"]}}, "not a valid ds-doctor report"),
        ({"schema_version": "2"}, "not a valid ds-doctor report"),
        ({"nodes": [[[[[[[[[[]]]]]]]]]]}, "not a valid ds-doctor report"),
    ],
)
def test_a_report_of_the_wrong_shape_is_one_line(tmp_path: Path, change: dict, needle: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**good_report(), **change}))
    with pytest.raises(InputError) as caught:
        load_report_file(path)
    assert needle in one_line(caught)


def test_a_report_that_is_too_big_too_deep_or_not_a_file_is_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"tool": {"name": "ds-doctor"}, "results": ' + "[" * 100_000 + "]" * 100_000 + "}")
    big = tmp_path / "big.json"
    with big.open("wb") as handle:
        handle.truncate(65 * 2**20)
    for path, needle in (
        (deep, "nested more than 64 levels deep"),
        (big, "65 MiB, more than the 64 MiB a report"),
        (Path("/dev/zero"), "more than 64 MiB (an endless stream?)"),
    ):
        with pytest.raises(InputError) as caught:
            load_report_file(path)
        assert needle in one_line(caught)


@pytest.mark.parametrize(
    ("manifest", "needle"),
    [
        ({"manifest_version": "x", "planned": []}, "manifest_version is 'x', not a number"),
        ({"manifest_version": 1, "planned": "abc"}, "planned is 'abc', not a list"),
        ({"manifest_version": 1, "planned": [1]}, "a planned case is not a JSON object"),
        ({"manifest_version": 1, "planned": [], "env": [1]}, "env is [1], not a JSON object"),
        (
            {"manifest_version": 1, "planned": [], "started_at": "yesterday"},
            "started_at is 'yesterday', not a time",
        ),
        (
            {
                "manifest_version": 1,
                "started_at": "2026-11-21T00:00:00Z",
                "level": 2,
                "argv": [],
                "env": {},
                "hardware": {},
                "skips": [],
                "planned": [
                    {
                        "case": "x[ws]",
                        "probe": "x",
                        "scenario": "s",
                        "variant": "v",
                        "world_size": 10**12,
                        "level": 1,
                        "reproduce": False,
                        "device_kind": "cpu",
                    }
                ],
            },
            "has world size 1,000,000,000,000: beyond the 1,048,576 ranks",
        ),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_one_line(tmp_path: Path, manifest: dict, needle: str) -> None:
    (tmp_path / "run.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError) as caught:
        load_manifest(RunDir(tmp_path))
    assert needle in one_line(caught)


PORT_IN_USE = (
    "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. The "
    "server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).\n"
)


def test_a_utf16_log_reads_as_its_text_by_its_bom_and_by_its_shape(tmp_path: Path) -> None:
    """What PowerShell's `>` writes (UTF-16LE with a BOM) reads as the same text as the UTF-8 log: whole, and as a
    tail read past the BOM (the cut at a line, at a character boundary)."""
    from ds_doctor.knowledge.triage import read_source
    from ds_doctor.userinput import log_text, read_log, utf16

    text = "".join(f"line {i}: step ok\r\n" for i in range(2000)) + PORT_IN_USE.replace("\n", "\r\n")
    path = tmp_path / "job.log"
    path.write_bytes(b"\xff\xfe" + text.encode("utf-16-le"))
    assert utf16(path.read_bytes()) == "utf-16"
    assert read_source(str(path)).text == text
    tail = read_log(str(path), limit=4001)  # odd: the tail starts inside a character
    assert tail.note is not None and utf16(tail.data) == "utf-16-le"
    assert log_text(tail.data).startswith("line ") and log_text(tail.data).endswith(
        PORT_IN_USE.replace("\n", "\r\n")
    )
    assert utf16(b"plain ascii text, no NULs") is None and log_text("\ufeffutf-8".encode()) == "utf-8"


def test_a_zipped_log_reads_its_largest_file_and_says_which(tmp_path: Path) -> None:
    import zipfile

    from ds_doctor.knowledge.triage import read_source

    archive = tmp_path / "logs.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
        zipped.writestr("README.txt", "see the rank logs")
        zipped.writestr("logs/rank0.log", "step 1 ok\n" * 100 + PORT_IN_USE)
        zipped.writestr("logs/", "")
    read = read_source(str(archive))
    assert read.text.endswith(PORT_IN_USE)
    assert read.notes == (f"{archive}: read logs/rank0.log, the largest of 2 file(s) in the zip archive",)
    (tmp_path / "broken.zip").write_bytes(b"PK\x03\x04" + b"\x00" * 64)
    with pytest.raises(UserInputError, match="cannot read the zip archive"):
        read_source(str(tmp_path / "broken.zip"))
    with zipfile.ZipFile(tmp_path / "empty.zip", "w") as zipped:
        zipped.writestr("dir/", "")
    with pytest.raises(UserInputError, match="a zip archive with no file in it"):
        read_source(str(tmp_path / "empty.zip"))

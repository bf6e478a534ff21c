"""Hostile option values: numbers that are not finite or not plausible, outputs that are also inputs, special files,
an endpoint that does not resolve, secrets inside a bad option. Each is one line on stderr and exit 2, before
anything runs or is written (issues 21 and 27)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from ds_doctor.options import MAX_NPROC, MAX_WORLD_SIZE, check_distinct, one_line
from tests.bounds import GENEROUS_S
from tests.test_cli import make_inputs, run_cli

#: (arguments, a word the one-line message must contain); {tmp} is the test's directory, made by make_inputs
HOSTILE = [
    (["run", "--timeout", "nan"], "not a finite number"),
    (["run", "--timeout", "inf"], "--timeout"),
    (["run", "--timeout", "1e308"], "--timeout"),
    (["run", "--timeout", "-nan"], "not a finite number"),
    (["run", "--join-timeout", "nan"], "not a finite number"),
    (["run", "--join-timeout", "inf"], "--join-timeout"),
    (["run", "--tolerance", "nan"], "not a finite number"),
    (["run", "--suspect-below", "nan"], "not a finite number"),
    (["diff", "{tmp}/good.json", "{tmp}/good.json", "--tolerance", "nan"], "not a finite number"),
    (["run", "--nproc", str(MAX_NPROC + 1)], "--nproc"),
    (["run", "--nproc", "9" * 5000], "--nproc"),
    (["run", "--nnodes", "1000000000", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:1"], "--nnodes"),
    (["run", "--nnodes", "2", "--node-rank", "99999999999", "--rdzv-endpoint", "127.0.0.1:1"], "--node-rank"),
    (
        ["run", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:" + "9" * 5000],
        "--rdzv-endpoint",
    ),
    (["triage", "--world-size", str(MAX_WORLD_SIZE + 1), "{tmp}/good.json"], "--world-size"),
    (
        ["diff", "{tmp}/good.json", "{tmp}/other.json", "--out", "{tmp}/good.json"],
        "is also BASELINE (an input)",
    ),
    (["diff", "{tmp}/other.json", "{tmp}/good.json", "--out", "{tmp}/./good.json"], "is also NEW (an input)"),
    (["diff", "{tmp}/good.json", "{tmp}/other.json", "--out", "{tmp}/hardlink.json"], "is also BASELINE"),
    (["diff", "{tmp}/good.json", "{tmp}/other.json", "--out", "{tmp}/symlink.json"], "is also BASELINE"),
    (["run", "--baseline", "{tmp}/good.json", "--junit", "{tmp}/good.json"], "is also --baseline (an input)"),
    (
        ["run", "--deepspeed-config", "{tmp}/a_file", "--prometheus", "{tmp}/a_file"],
        "is also --deepspeed-config",
    ),
    (["run", "--junit", "{tmp}/x.xml", "--prometheus", "{tmp}/x.xml"], "is also --junit (another output)"),
    (["run", "--junit", "{tmp}/plain_dir"], "is a directory"),
    (["run", "--junit", "{tmp}/missing_dir/x.xml"], "not a writable directory"),
    (["run", "--prometheus", "{tmp}/socket"], "is a socket"),
    (["report", "{tmp}/good.json", "--junit", "{tmp}/good.json"], "is also PATH (an input)"),
    (["report", "{tmp}/gutted_run", "--junit", "{tmp}/gutted_run/run.xml"], "inside the run directory"),
]


def make_hostile_inputs(tmp: Path) -> None:
    make_inputs(tmp)
    os.link(tmp / "good.json", tmp / "hardlink.json")
    (tmp / "symlink.json").symlink_to(tmp / "good.json")
    import socket

    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp / "socket"))  # left bound: a socket file on disk is what matters
    server.close()


@pytest.mark.parametrize(("args", "needle"), HOSTILE, ids=[" ".join(a)[:60] for a, _ in HOSTILE])
def test_hostile_options_are_one_line_exit_2_and_write_nothing(capsys, tmp_path, args, needle) -> None:
    make_hostile_inputs(tmp_path)
    before = {p.relative_to(tmp_path): p.lstat().st_mtime_ns for p in tmp_path.rglob("*")}
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if args[0] == "run":
        args += ["--out", str(tmp_path / "out")]
    code, out, err = run_cli(capsys, *args)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("ds-doctor: error:") and needle in err, err
    assert "Traceback" not in err and len(err) < 700
    after = {p.relative_to(tmp_path): p.lstat().st_mtime_ns for p in tmp_path.rglob("*")}
    assert after == before  # nothing written, nothing replaced, no empty --out folder


def test_a_host_that_does_not_resolve_is_a_usage_error_within_seconds(capsys, tmp_path) -> None:
    started = time.monotonic()
    code, _, err = run_cli(
        capsys,
        "run",
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--rdzv-endpoint",
        "no-such-host.invalid:29400",
        "--out",
        str(tmp_path / "out"),
    )
    assert code == 2 and "does not resolve" in err and "--rdzv-endpoint" in err, err
    assert (
        time.monotonic() - started < GENEROUS_S
    )  # it waited --join-timeout (300 s) before, then ended in exit 3
    assert not (tmp_path / "out").exists()


SECRET = "hunter2hunter2hunter2"


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", f"https://admin:{SECRET}@head:29400"],
        ["run", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", f"token={SECRET}"],
        ["run", "--model", f"hf_{SECRET}abcdefghij:f"],
        ["run", "-k", f"password={SECRET}"],
    ],
)
def test_a_usage_error_never_echoes_a_secret(capsys, tmp_path, args) -> None:
    code, out, err = run_cli(capsys, *args, "--out", str(tmp_path / "out"))
    assert code == 2 and err.startswith("ds-doctor: error:"), err
    assert SECRET not in err and SECRET not in out


def test_one_line_escapes_controls_and_bounds_the_length() -> None:
    line = one_line("bad\nvalue\x1b[2J\r" + "x" * 10_000)
    assert "\n" not in line and "\x1b" not in line and "\r" not in line and "\\x1b" in line
    assert len(line) <= 500 and line.endswith("…")


def test_a_character_device_may_take_several_outputs() -> None:
    check_distinct({"--junit": Path("/dev/null"), "--prometheus": Path("/dev/null")}, {})


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_junit_to_a_character_device_writes_in_place_and_keeps_it(capsys, tmp_path) -> None:
    """As root, `--junit /dev/null` replaced /dev/null itself with a regular file (seen on a device made with
    mknod): the device must stay a device."""
    make_inputs(tmp_path)
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    code, _, err = run_cli(
        capsys,
        "report",
        str(tmp_path / "good.json"),
        "--out",
        str(tmp_path / "out"),
        "--junit",
        str(null),
        "--prometheus",
        str(null),
    )
    assert code in (0, 1), err
    assert stat.S_ISCHR(null.lstat().st_mode)
    code, _, err = run_cli(
        capsys, "diff", str(tmp_path / "good.json"), str(tmp_path / "good.json"), "--out", str(null)
    )
    assert code == 0, err
    assert stat.S_ISCHR(null.lstat().st_mode)


@pytest.mark.parametrize(
    "host", ["../../escaped", "/", "a/../../b", "..", "x" * 300, "\u202eevil\n# heading"]
)
def test_a_host_inside_a_report_never_names_a_file_outside_the_folder(capsys, tmp_path, host) -> None:
    """`report` names its outputs from the report's host: a host holding `/` or `..` wrote outside --out."""
    import json

    from tests.test_cli import good_report_json

    data = json.loads(good_report_json())
    data["hardware"]["host"] = host
    source = tmp_path / "in" / "report.json"
    source.parent.mkdir()
    source.write_text(json.dumps(data))
    out = tmp_path / "in" / "out"
    code, _, err = run_cli(capsys, "report", str(source), "--out", str(out))
    assert code == 0, err
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file() and p != source)
    assert written and all(p.parent == out for p in written), written
    assert all(len(p.name) < 120 for p in written)

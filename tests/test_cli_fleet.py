"""`ds-doctor fleet` end to end over files on disk: the nightly layout, exit codes, the newest report of a host
read and its older ones not, hostile files each one line and listed while the rest goes on, and the usage errors
(exit 2, one line)."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest

from ds_doctor.cli import main
from ds_doctor.cli_fleet import MAX_DEPTH
from tests.bounds import GENEROUS_S
from tests.reports.fleet_samples import COMM, SICK, node, write_nightly
from tests.reports.samples import NOW


def run_cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(arg) for arg in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture()
def state(tmp_path: Path) -> Path:
    """A nightly STATE_DIR of three healthy nodes, one of them slow."""
    for report in (node("node-a"), node("node-b"), node("node-c", busbw=40.0)):
        write_nightly(tmp_path, report)
    return tmp_path


def test_a_healthy_fleet_exits_0_a_failing_node_1(capsys, state: Path) -> None:
    code, out, err = run_cli(capsys, "fleet", state)
    assert code == 0 and err == "" and out.startswith("# ds-doctor fleet: 3 node(s), none failing")
    assert "busbw 40 GB/s (-60.0% vs 100)" in out
    write_nightly(state, node("node-d", recording=SICK))
    code, out, _ = run_cli(capsys, "fleet", state, "--json")
    data = json.loads(out)
    assert code == 1 and data["failed"] and [n["host"] for n in data["nodes"] if n["failed"]] == ["node-d"]
    assert {
        m["measure"] for n in data["nodes"] if n["host"] == "node-c" for m in n["measures"] if m["below"]
    } == {"busbw_gbps", "algbw_gbps"}


def test_files_named_one_by_one_and_the_markdown_written_to_out(capsys, state: Path, tmp_path: Path) -> None:
    files = sorted(state.rglob("ds-doctor-*.json"))
    # a file named on the command line: any name
    renamed = files[0].rename(files[0].with_name("any-name.json"))
    out_file = tmp_path / "fleet.md"
    code, out, _ = run_cli(capsys, "fleet", renamed, *files[1:], "--out", out_file)
    assert code == 0 and out_file.read_text() == out and "| node-a |" in out
    nodes = json.loads(run_cli(capsys, "fleet", *files[1:], "--tolerance", "70", "--json")[1])["nodes"]
    # 60 % below: within 70
    assert len(nodes) == 2 and not [m for n in nodes for m in n["measures"] if m["below"]]


def test_of_one_hosts_reports_only_the_newest_is_read(capsys, tmp_path: Path) -> None:
    """A month of nightly reports per node: the newest is read, the rest only counted. A newest one that cannot be
    read is listed, and the one before it read in its place."""
    for day in range(1, 6):
        write_nightly(tmp_path, node("node-a", started=NOW - dt.timedelta(days=day), recording=SICK))
    write_nightly(tmp_path, node("node-b"))
    newest = write_nightly(tmp_path, node("node-a"))
    code, out, _ = run_cli(capsys, "fleet", tmp_path, "--json")
    data = json.loads(out)
    assert code == 0 and data["not_read"] == 5 and len(data["nodes"]) == 2
    damaged = newest.with_name(newest.name.replace("T120000Z", "T130000Z"))
    damaged.write_text('{"schema_version": 2, "tool": ')
    code, out, err = run_cli(capsys, "fleet", tmp_path, "--json")
    data = json.loads(out)
    assert code == 0 and data["not_read"] == 5 and [u["source"] for u in data["unreadable"]] == [str(damaged)]
    assert err.count("\n") == 1 and "unreadable: not valid JSON" in err
    assert [n["source"] for n in data["nodes"] if n["host"] == "node-a"] == [str(newest)]


def test_two_reports_of_one_host_in_two_folders_the_newest_wins(capsys, tmp_path: Path) -> None:
    write_nightly(tmp_path / "one", node("node-a", started=NOW - dt.timedelta(days=1), recording=SICK))
    write_nightly(tmp_path / "two", node("node-a"))
    code, out, _ = run_cli(capsys, "fleet", tmp_path)
    assert code == 0 and "node-a: newest of 2 reports of this host; older:" in out


def make_hostile(folder: Path) -> dict[str, str]:
    """Files where a report is expected, each with (part of) the line it must get."""
    folder.mkdir(parents=True, exist_ok=True)
    good = json.loads(node("node-x").to_json())
    planted = {
        "ds-doctor-empty.json": ("", "empty file"),
        "ds-doctor-malformed.json": ('{"schema_version": 2, "tool": ', "not valid JSON"),
        "ds-doctor-other.json": (
            json.dumps({"tool": {"name": "other"}, "results": []}),
            "not a ds-doctor report",
        ),
        "ds-doctor-newer.json": (json.dumps({**good, "schema_version": 99}), "newer"),
        "ds-doctor-invalid.json": (json.dumps({**good, "results": "none"}), "not a valid ds-doctor report"),
        "ds-doctor-deep.json": ("[" * 100_000 + "]" * 100_000, "nested"),
        "ds-doctor-latin1.json": ('{"a": "caf\xe9"}', "not UTF-8"),
        "ds-doctor-time.json": (json.dumps({**good, "started_at": "last tuesday"}), "is not a time"),
        # a multi-node report's node section is a node's row in the fleet: it is held to a node's own shape
        "ds-doctor-node-section.json": (
            json.dumps(
                {
                    **good,
                    "nodes": [
                        {"node": 0, "host": "node-x", "env": good["env"], "hardware": good["hardware"]},
                        {
                            "node": 1,
                            "host": "node-y",
                            "env": good["env"],
                            "hardware": {**good["hardware"], "gpus": "eight"},
                        },
                    ],
                }
            ),
            "not a valid ds-doctor report at nodes/1/hardware/gpus",
        ),
    }
    for name, (text, _) in planted.items():
        encoding = "latin-1" if "latin1" in name else "utf-8"
        (folder / name).write_text(text, encoding=encoding)
    with open(folder / "ds-doctor-huge.json", "wb") as handle:  # sparse: 65 MiB of nothing, over the bound
        handle.truncate(65 << 20)
    os.mkfifo(folder / "ds-doctor-fifo.json")  # reading it would block for ever
    (folder / "ds-doctor-zero.json").symlink_to("/dev/zero")  # reading it would never end
    (folder / "loop").symlink_to(folder)  # a link to a directory is not followed
    deep = folder
    for level in range(MAX_DEPTH + 3):  # below MAX_DEPTH nothing is looked at
        deep = deep / f"d{level}"
    deep.mkdir(parents=True)
    (deep / "ds-doctor-too-deep.json").write_text("{")
    return {
        **{name: why for name, (_, why) in planted.items()},
        "ds-doctor-huge.json": "more than the 64 MiB",
        "ds-doctor-fifo.json": "not a regular file",
        "ds-doctor-zero.json": "not a regular file",
    }


def test_hostile_files_are_one_line_each_and_the_fleet_goes_on(capsys, state: Path) -> None:
    expected = make_hostile(state / "junk")
    started = time.monotonic()
    code, out, err = run_cli(capsys, "fleet", state, "--json")
    assert time.monotonic() - started < GENEROUS_S  # a FIFO opened, /dev/zero or a 65 MiB file read: forever
    data = json.loads(out)
    assert code == 0 and len(data["nodes"]) == 3
    reasons = {Path(u["source"]).name: u["reason"] for u in data["unreadable"]}
    assert set(reasons) == set(expected)
    for name, why in expected.items():
        assert why in reasons[name], (name, reasons[name])
    lines = err.splitlines()
    assert len(lines) == len(expected) and all(line.startswith("ds-doctor: warning: ") for line in lines)
    assert "Traceback" not in err and max(map(len, lines)) <= 520


def test_nothing_readable_is_a_usage_error(capsys, tmp_path: Path) -> None:
    expected = make_hostile(tmp_path / "junk")
    code, out, err = run_cli(capsys, "fleet", tmp_path)
    assert (
        code == 2
        and out == ""
        and err.count("\n") == 1
        and err.startswith("ds-doctor: error: no readable ds-doctor report: ")
    )
    assert err.rstrip().endswith(f"(and {len(expected) - 1} more unreadable file(s))")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["fleet", "{tmp}/empty"], "no ds-doctor report (ds-doctor-*.json) in"),
        (["fleet", "{tmp}/missing.json"], "no readable ds-doctor report: {tmp}/missing.json: no such file"),
        (["fleet"], "Missing argument"),
        (["fleet", "{tmp}/state", "--tolerance", "100"], "--tolerance"),
        (["fleet", "{tmp}/state", "--tolerance", "nan"], "--tolerance"),
        (["fleet", "{tmp}/state", "--out", "{tmp}/no-such-dir/fleet.md"], "--out"),
        (["fleet", "{tmp}/report.json", "--out", "{tmp}/report.json"], "would be overwritten"),
    ],
)
def test_usage_errors_are_one_line(capsys, tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "empty").mkdir()
    report = write_nightly(tmp_path / "state", node("node-a"))
    os.link(report, tmp_path / "report.json")
    code, out, err = run_cli(capsys, *(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert code == 2 and out == "" and message.replace("{tmp}", str(tmp_path)) in err and err.count("\n") == 1
    assert err.startswith("ds-doctor: error: ") and "Traceback" not in err


def test_a_shared_gpu_case_is_named_and_not_compared(capsys, tmp_path: Path) -> None:
    from dataclasses import replace

    from tests.reports.fleet_samples import comm, with_shared_gpu

    lone = node("node-c", busbw=2.0)
    lone = replace(
        lone, results=tuple(with_shared_gpu(comm(2.0)) if r.key == COMM else r for r in lone.results)
    )
    for report in (node("node-a"), node("node-b", busbw=80.0), lone):
        write_nightly(tmp_path, report)
    code, out, _ = run_cli(capsys, "fleet", tmp_path, "--json")
    (c,) = [n for n in json.loads(out)["nodes"] if n["host"] == "node-c"]
    assert code == 0 and c["shared_gpu"] == [COMM] and not [m for m in c["measures"] if m["case"] == COMM]


def test_a_folder_too_big_to_walk_is_a_usage_error(capsys, monkeypatch, state: Path) -> None:
    """A DIR of `/` stops at a bound (entries looked at, reports found), in one line, before anything is read."""
    import ds_doctor.cli_fleet as cli_fleet

    monkeypatch.setattr(cli_fleet, "MAX_ENTRIES", 5)
    code, _, err = run_cli(capsys, "fleet", state)
    assert code == 2 and "more than 5 entries below it" in err and err.count("\n") == 1
    monkeypatch.setattr(cli_fleet, "MAX_ENTRIES", 1000)
    monkeypatch.setattr(cli_fleet, "MAX_FILES", 2)
    code, _, err = run_cli(capsys, "fleet", state)
    assert code == 2 and "3 reports: ds-doctor fleet reads at most 2" in err
    # a month of older reports of each host is not counted: only the newest of each is read
    for day in range(1, 4):
        write_nightly(state, node("node-a", started=NOW - dt.timedelta(days=day)))
    monkeypatch.setattr(cli_fleet, "MAX_FILES", 3)
    code, _, err = run_cli(capsys, "fleet", state)
    assert code == 0, err


def test_the_html_page_draws_each_node_against_its_groups_median(capsys, state: Path, tmp_path: Path) -> None:
    """`fleet --html`: one bar per node and measure, the value over the median of its GPU group, the slow node red
    and said below the tolerance's edge; a self-contained page (nothing fetched), also given a folder."""
    page = tmp_path / "fleet.html"
    code, _, _ = run_cli(capsys, "fleet", state, "--html", page)
    assert code == 0
    text = page.read_text()
    assert "default-src 'none'" in text and "<script" not in text and " src=" not in text
    chart = text[text.index("<title>comm[all_reduce-ws8] busbw") :]
    chart = chart[: chart.index("</svg>")]
    assert chart.count("<rect") == 3 and chart.count('fill="#d62728"') == 1  # node-c: 40 of a median of 100
    assert ">0.40</text>" in chart and ">1.00</text>" in chart and ">median</text>" in chart
    folder = tmp_path / "pages"
    folder.mkdir()
    assert run_cli(capsys, "fleet", state, "--html", folder)[0] == 0
    assert (folder / "ds-doctor-fleet.html").exists()

"""`fleet TABLE` over a shared results table with one file that does not read (15 bytes of `PAR1garbagePAR1`, a
Parquet file cut short): it was the whole table unreadable, exit 2, every real failing node hidden. The files are
now read apart, each one that does not read is named in a warning line and the rest read as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ds_doctor.cli import main
from ds_doctor.reports.model import Outcome
from tests.reports.fleet_samples import node, write_nightly
from tests.reports.samples import case

pytest.importorskip("pyarrow")
duckdb = pytest.importorskip("duckdb")

HOSTS = ("node-a", "node-b", "node-c")


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """Three nodes' runs as the results table; node-b has a failing case."""
    table = tmp_path / "table"
    failing = case(Outcome.FAIL, "broadcast", probe="comm", world_size=8, reason="mismatch")
    for host in HOSTS:
        report = node(host, results=(failing,) if host == "node-b" else ())
        path = write_nightly(tmp_path / "state", report)
        assert main(["report", str(path), "--out", str(tmp_path / "rendered"), "--table", str(table)]) in (
            0,
            1,
        )
    return table


def test_one_corrupt_file_is_named_and_the_rest_of_the_table_read(
    capsys: pytest.CaptureFixture[str], table: Path
) -> None:
    capsys.readouterr()
    night = next(table.glob("night=*"))
    garbage = night / "node=node-a" / "c.parquet"
    garbage.write_bytes(b"PAR1garbagePAR1")
    real = next((night / "node=node-c").glob("*.parquet"))
    cut = night / "node=node-c" / "cut.parquet"
    cut.write_bytes(real.read_bytes()[:-40])  # a file cut short: its footer gone
    assert main(["fleet", str(table), "--json"]) == 1  # was 2: cannot read the results table
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert sorted(n["host"] for n in data["nodes"]) == list(HOSTS)
    assert [n["host"] for n in data["nodes"] if n["failing"]] == ["node-b"]
    lines = err.splitlines()
    assert [line.split(": unreadable: ")[0] for line in lines] == [
        f"ds-doctor: warning: {garbage}",
        f"ds-doctor: warning: {cut}",
    ], err
    assert all(": unreadable: not a readable Parquet file: " in line for line in lines), err
    assert sorted(u["source"] for u in data["unreadable"]) == [str(garbage), str(cut)]


def test_the_files_are_read_apart_in_halves(table: Path) -> None:
    """Every file that reads is kept and each one that does not is named with DuckDB's reason."""
    from ds_doctor.table.query import connect, readable

    files = sorted(str(p) for p in table.rglob("*.parquet"))
    bad = str(table / "bad.parquet")
    Path(bad).write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
    con = connect()
    try:
        good, unread = readable(con, [*files, bad])
        assert good == files and [path for path, _ in unread] == [bad]
        assert readable(con, []) == ([], [])
    finally:
        con.close()

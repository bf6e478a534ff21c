"""The results table: `report --table` writes a month of nightly reports as Parquet rows by night and node; DuckDB
and pyarrow read it as docs/nightly.md shows (the examples there are run here); `fleet` over the table says what
it says over the JSON; what a table carries is scrubbed and bounded when read; each refusal is one line."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from ds_doctor.cli import main
from tests.fleet.nights import Month

pa = pytest.importorskip("pyarrow")
duckdb = pytest.importorskip("duckdb")
ROOT = Path(__file__).resolve().parents[2]
DOCS_TABLE = "/srv/ds-doctor/table"  # the folder docs/nightly.md's examples name


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A month of eight nodes' nightly reports (node-3 loses 2 % a night), as JSON and, through `report --table`,
    as the results table."""
    root = tmp_path_factory.mktemp("month")
    state, table = root / "state", root / "table"
    Month().write(state)
    for path in sorted(state.rglob("ds-doctor-*.json")):
        assert main(["report", str(path), "--out", str(root / "rendered"), "--table", str(table)]) == 0
    return state, table


def fleet_json(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, dict]:
    code = main(["fleet", *map(str, args), "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    return code, json.loads(out)


def test_the_layout_is_one_file_per_node_and_night(month: tuple[Path, Path]) -> None:
    _, table = month
    files = sorted(table.rglob("*.parquet"))
    assert len(files) == 30 * 8
    assert {f.parent.name for f in files} == {f"node=node-{i}" for i in range(8)}
    assert len({f.parent.parent.name for f in files}) == 30
    assert all(re.fullmatch(r"night=\d{4}-\d{2}-\d{2}", f.parent.parent.name) for f in files)
    assert not list(table.rglob(".*"))  # no half-written file left


def test_fleet_over_the_table_says_what_it_says_over_the_reports(
    capsys: pytest.CaptureFixture[str], month: tuple[Path, Path]
) -> None:
    state, table = month
    for since in ((), ("--since", "30d")):
        _, from_json = fleet_json(capsys, state, *since)
        _, from_table = fleet_json(capsys, table, *since)
        for data in (from_json, from_table):
            for node in data["nodes"]:
                node.pop("source"), node.pop("superseded")
            data.pop("not_read")
        assert from_table == from_json
    assert {d["host"] for d in from_table["drifts"]} == {"node-3"}


def run_docs_examples(table: Path) -> dict:
    """Every python block of docs/nightly.md's results-table section, run against `table`."""
    text = (ROOT / "docs" / "nightly.md").read_text()
    section = text[text.index("## The results table") :]
    section = section[: section.find("\n## ", 3)] if "\n## " in section[3:] else section
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) >= 2
    scope: dict = {}
    for block in blocks:
        exec(block.replace(DOCS_TABLE, str(table)), scope)  # the docs' own examples
    return scope


def test_the_docs_examples_read_the_table_through_duckdb_and_pyarrow(month: tuple[Path, Path]) -> None:
    scope = run_docs_examples(month[1])
    # DuckDB: each node's busbw, night by night; node-3's falls
    nightly = scope["nightly"]
    node3 = [busbw for node, _, busbw in nightly if node == "node-3"]
    assert len(node3) == 30 and node3[-1] < 0.6 * node3[0]
    # pyarrow's dataset reader: the same rows
    measures = scope["measures"]
    assert measures.num_rows == 30 * 8 and set(measures.column("node").to_pylist()) == {
        f"node-{i}" for i in range(8)
    }
    assert measures.schema.field("night").type == pa.string()


def test_a_table_is_scrubbed_and_bounded_when_read(
    capsys: pytest.CaptureFixture[str], month: tuple[Path, Path], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    from ds_doctor.table.parquet import schema

    _, table = month
    (planted,) = [f for f in table.rglob("*.parquet") if "node-5" in str(f)][-1:]
    rows = pq.read_table(planted).to_pylist()
    token = "hf_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7"
    for row in rows:
        if row["kind"] == "case" and row["case"].startswith("comm"):
            row["outcome"], row["reason"] = "error", f"HF_TOKEN={token} " + "x" * 100_000
        if row["kind"] == "fingerprint" and row["key"] == "env:NCCL_IB_HCA":
            row["key"], row["text"] = "env:WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567"
    copy = tmp_path / "table"
    target = copy / planted.relative_to(table)
    target.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema()), target)
    code, data = fleet_json(capsys, copy)
    assert code == 1
    text = json.dumps(data)
    assert token not in text and "0123456789abcdef0123456789abcdef01234567" not in text
    (node,) = data["nodes"]
    assert node["failing"][0]["outcome"] == "error" and len(node["failing"][0]["reason"]) <= 2_000


def test_refusals_are_one_line(
    capsys: pytest.CaptureFixture[str],
    month: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state, table = month
    monkeypatch.setenv("HOME", str(tmp_path))  # DuckDB's extensions folder: no httpfs there, no network tried
    broken = tmp_path / "broken" / "night=2026-11-28" / "node=a"
    broken.mkdir(parents=True)
    (broken / "x.parquet").write_bytes(b"not parquet at all")
    empty = tmp_path / "empty" / "night=2026-11-28"
    empty.mkdir(parents=True)
    one = next(state.rglob("ds-doctor-*.json"))
    for args, words in (
        (["fleet", str(tmp_path / "broken")], "cannot read the results table"),
        (["fleet", str(tmp_path / "empty")], "no node's run in"),
        (["fleet", str(table), str(state)], "either results tables"),
        (["fleet", "s3://bucket/ds-doctor/table"], "httpfs extension is not installed"),
        (["report", str(one), "--out", str(tmp_path), "--table", str(one)], "--table"),
    ):
        assert main(args) == 2, args
        out, err = capsys.readouterr()
        assert out == ""
        assert err.count("\n") == 1 and words in err, (args, err)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # not installed
    assert main(["report", str(one), "--out", str(tmp_path), "--table", str(tmp_path / "t")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'ds-doctor[table]'" in err
    monkeypatch.setitem(sys.modules, "duckdb", None)
    assert main(["fleet", str(table)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs DuckDB" in err

"""`fleet` over a cluster's worth of reports: read in reader processes over the cores (the same fleet as read in
one process), a planted slow node and a planted skewed node named among quiet ones, and above ALL_ROWS nodes the
Markdown lists only the nodes with something to say."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ds_doctor import cli_fleet
from ds_doctor.cli import main
from ds_doctor.reports.fleet import ALL_ROWS
from tests.reports.fleet_samples import node, write_nightly

NODES = ALL_ROWS + 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    state = tmp_path_factory.mktemp("cluster")
    rng = random.Random(5)
    for i in range(NODES):
        busbw = 100 * (1 + rng.gauss(0, 0.02))
        write_nightly(
            state,
            node(
                f"gpu-{i:03d}",
                busbw=round(busbw * (0.6 if i == 17 else 1), 3),
                deepspeed="0.15.4" if i == 42 else "0.17.6",
            ),
        )
    (state / "gpu-050" / "reports" / "ds-doctor-gpu-050-20261122T000000Z.json").write_text(
        "{"
    )  # newer, broken
    return state


def test_the_reader_processes_read_what_one_process_reads(
    capsys: pytest.CaptureFixture[str], cluster: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert NODES >= cli_fleet.PARALLEL_FROM
    assert main(["fleet", str(cluster), "--json"]) == 0
    parallel = capsys.readouterr()
    monkeypatch.setattr(cli_fleet, "PARALLEL_FROM", 10**9)
    assert main(["fleet", str(cluster), "--json"]) == 0
    alone = capsys.readouterr()
    assert parallel == alone
    data = json.loads(parallel.out)
    assert len(data["nodes"]) == NODES and [u["reason"] for u in data["unreadable"]] == [
        "not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2"
    ]
    below = {n["host"] for n in data["nodes"] if any(m["below"] for m in n["measures"])}
    skewed = {n["host"]: [d["key"] for d in n["deviations"]] for n in data["nodes"] if n["deviations"]}
    assert below == {"gpu-017"} and skewed == {"gpu-042": ["package:deepspeed"]}


def test_above_all_rows_the_markdown_lists_the_nodes_with_something_to_say(
    capsys: pytest.CaptureFixture[str], cluster: Path
) -> None:
    assert main(["fleet", str(cluster)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| gpu-")]
    assert [row.split(" | ")[0] for row in rows] == ["| gpu-017", "| gpu-042"]
    assert f"{NODES - 2:,} more node(s) with nothing to say" in out


def test_above_all_rows_the_html_page_too(
    capsys: pytest.CaptureFixture[str], cluster: Path, tmp_path: Path
) -> None:
    page = tmp_path / "fleet.html"
    assert main(["fleet", str(cluster), "--html", str(page)]) == 0
    capsys.readouterr()
    html = page.read_text()
    assert html.count('<tr><td class="">gpu-') == 2 and 'class="">gpu-042<' in html and ">gpu-017<" in html
    assert f"{NODES - 2:,} more node(s)" in html
    assert f"the 40 lowest of {NODES} nodes" in html and html.count("<rect ") <= 40 * 4

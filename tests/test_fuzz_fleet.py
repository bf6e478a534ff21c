"""`ds-doctor fleet` fed hostile values (as tests/test_fuzz_cli.py feeds the other commands): exit 0, 1 or 2, a usage
error in one line, no traceback, in bounded time."""

from __future__ import annotations

import functools
import json

import pytest

pytest.importorskip("hypothesis")
from hypothesis import given
from hypothesis import strategies as st

from tests.reports.fleet_samples import node
from tests.test_fuzz_cli import FUZZ, VALUES, invoke, mutations, plant


@functools.cache
def report_text(host: str) -> str:
    """A node's report as JSON, built once: each example only breaks a field of it."""
    return node(host).to_json()


@FUZZ
@given(where=st.sampled_from(["source", "second-source", "tolerance", "out"]), value=VALUES)
def test_fleet_takes_any_value(capsys, tmp_path_factory, where: str, value: str) -> None:
    folder = tmp_path_factory.mktemp("fleet")
    state = folder / "state"
    state.mkdir()
    (state / "ds-doctor-node-a-20261121T120000Z.json").write_text(report_text("node-a"))
    args = {
        "source": ["fleet", value],
        "second-source": ["fleet", str(state), value],
        "tolerance": ["fleet", str(state), "--tolerance", value],
        "out": ["fleet", str(state), "--out", value],
    }[where]
    if value in ("-", "--") or value == "/":
        return  # `--` ends the options; `/` as a source is every report on the disk (tests/test_cli_fleet.py bounds it)
    invoke(capsys, args, folder)


@FUZZ
@given(mutation=mutations())
def test_a_fleet_with_a_report_broken_anywhere_is_never_exit_3(capsys, tmp_path_factory, mutation) -> None:
    """A node's report with a field broken, beside a good one: read and shown, or listed as unreadable."""
    folder = tmp_path_factory.mktemp("fleet")
    (folder / "ds-doctor-node-good-20261121T120000Z.json").write_text(report_text("node-good"))
    try:
        text = json.dumps(plant(json.loads(report_text("node-x")), *mutation))
    except (ValueError, RecursionError):
        return
    (folder / "ds-doctor-node-x-20261121T120000Z.json").write_text(text)
    code, err = invoke(capsys, ["fleet", str(folder), "--json"], folder)
    assert code in (0, 1) and err.count("\n") <= 1  # the good node is always there: never a usage error

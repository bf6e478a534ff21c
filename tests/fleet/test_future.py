"""`fleet` takes the newest report of each host, so a report dated far ahead (2099), which anyone who writes into a
shared reports folder or results table can plant, stood as the host's latest for good and hid its real, failing,
report (exit 0, the host `ok`). A run dated later than now by more than a day of clock skew is now left out, named
in one warning line, and the host's older reports are read on."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from ds_doctor.cli import main
from ds_doctor.fleet.facts import CLOCK_SKEW, future_dated
from ds_doctor.reports.model import Outcome
from tests.reports.fleet_samples import node, write_nightly
from tests.reports.samples import case

FORGED = dt.datetime(2099, 1, 1, tzinfo=dt.timezone.utc)
LEFT_OUT = "dated in the future (started_at 2099-01-01T00:00:00Z): not taken as the host's latest"


def real_and_forged(state: Path) -> tuple[Path, Path]:
    """node1's real report (a case fails), from an hour ago, and a forged one of node1 dated 2099 that passes, in
    the same folder and named as `run` names node1's reports (so the forged one is the newest by name too)."""
    an_hour_ago = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(hours=1)
    failing = case(Outcome.FAIL, "broadcast", probe="comm", world_size=8, reason="mismatch on rank 3")
    real = write_nightly(state, node("node1", started=an_hour_ago, results=(failing,)))
    forged = write_nightly(state, node("node1", started=FORGED))
    return real, forged


def fleet(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, dict, str]:
    code = main(["fleet", *map(str, args), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out else {}, err


def test_a_report_dated_in_the_future_does_not_hide_the_hosts_failing_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Was exit 0 and node1 `ok`: the forged report, newest by name and by time, was the only one read."""
    real, forged = real_and_forged(tmp_path)
    code, data, err = fleet(capsys, tmp_path)
    assert code == 1, err
    (view,) = data["nodes"]
    assert view["host"] == "node1" and view["source"] == str(real)
    assert [f["case"] for f in view["failing"]] == ["comm[broadcast-ws8]"]
    assert err == f"ds-doctor: warning: {forged}: {LEFT_OUT}\n"
    assert data["unreadable"] == [{"source": str(forged), "reason": LEFT_OUT}]


def test_a_finish_dated_in_the_future_is_left_out_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    real, forged = real_and_forged(tmp_path)
    report = json.loads(forged.read_text())
    report["started_at"] = json.loads(real.read_text())["started_at"]  # a start that looks like tonight's
    report["finished_at"] = "2099-01-01T00:04:00Z"
    forged.write_text(json.dumps(report))
    code, data, err = fleet(capsys, tmp_path)
    assert code == 1 and data["nodes"][0]["source"] == str(real)
    assert "dated in the future (finished_at 2099-01-01T00:04:00Z): not taken as the host's latest" in err


def test_over_the_results_table_too(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Was exit 0: the table's newest file of a node is the one with the latest start."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("duckdb")
    table = tmp_path / "table"
    for path in real_and_forged(tmp_path / "state"):
        assert main(["report", str(path), "--out", str(tmp_path / "rendered"), "--table", str(table)]) in (
            0,
            1,
        )
    capsys.readouterr()
    code, data, err = fleet(capsys, table)
    assert code == 1, err
    assert [f["case"] for f in data["nodes"][0]["failing"]] == ["comm[broadcast-ws8]"]
    (forged,) = table.glob("night=2099-01-01/node=node1/*.parquet")
    assert err == (
        f"ds-doctor: warning: {forged}: dated in the future (started_at 2099-01-01T00:00:00+00:00): not taken as "
        "the host's latest\n"
    )


def test_a_clock_up_to_a_day_ahead_is_no_forgery() -> None:
    now = dt.datetime(2026, 11, 29, 12, tzinfo=dt.timezone.utc)
    ahead = (now + CLOCK_SKEW - dt.timedelta(minutes=1)).isoformat()
    assert future_dated(ahead, ahead, now) is None
    later = (now + CLOCK_SKEW + dt.timedelta(minutes=1)).isoformat()
    assert future_dated("2026-11-29T11:00:00Z", later, now) == (
        f"dated in the future (finished_at {later}): not taken as the host's latest"
    )
    assert future_dated("not a time", "", now) is None  # a time that does not parse is refused elsewhere

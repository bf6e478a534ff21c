"""`fleet --since`: a node whose bandwidth declines a little every night is named, with its slope and how sure;
noise, a fleet-wide trend, one bad night and too few nights name no one."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import pytest

from ds_doctor.cli import main
from ds_doctor.fleet.drift import MIN_NIGHTS, NightValue, drifts, fit, parse_since
from tests.fleet.nights import Month

NOW = dt.datetime(2026, 11, 28, 3, 0, tzinfo=dt.timezone.utc)


def fleet_json(capsys: pytest.CaptureFixture[str], *args: object) -> dict:
    code = main(["fleet", *map(str, args), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def series(values: dict[str, list[float]], case: str = "comm[all_reduce-ws8]") -> list[NightValue]:
    first = dt.date(2026, 10, 1)
    return [
        NightValue(host, "H100", case, "busbw_gbps", first + dt.timedelta(days=night), value)
        for host, nights in values.items()
        for night, value in enumerate(nights)
    ]


def test_a_node_declining_2_percent_a_night_is_named_over_30_nights(capsys, tmp_path: Path) -> None:
    Month().write(tmp_path)
    data = fleet_json(capsys, tmp_path, "--since", "30d")
    named = {d["host"] for d in data["drifts"]}
    assert named == {"node-3"}, data["drifts"]
    busbw = next(d for d in data["drifts"] if d["measure"] == "busbw_gbps")
    assert busbw["nights"] == 30 and -2.5 < busbw["pct_per_night"] < -1.5 and busbw["error_pct"] < 0.3
    assert busbw["change_pct"] < -35
    assert "30 night(s)" in data["window"]
    # the node's row says it too, and the Markdown has the section
    node3 = next(n for n in data["nodes"] if n["host"] == "node-3")
    assert {d["measure"] for d in node3["drifting"]} == {"busbw_gbps", "algbw_gbps"}
    assert main(["fleet", str(tmp_path), "--since", "30d"]) == 0
    out = capsys.readouterr().out
    assert "## Drifting across nights" in out and "| node-3 | comm[all_reduce-ws8] | busbw |" in out
    # without --since tonight's view only: no drift read, the older reports not read
    tonight = fleet_json(capsys, tmp_path)
    assert tonight["drifts"] == [] and tonight["window"] is None and tonight["not_read"] == 29 * 8


def test_noise_a_fleet_wide_trend_and_a_short_window_name_no_one(capsys, tmp_path: Path) -> None:
    Month(declining=None, fleet_trend=-0.02, noise=0.03, seed=3).write(tmp_path / "trend")
    assert fleet_json(capsys, tmp_path / "trend", "--since", "30d")["drifts"] == []
    Month().write(tmp_path / "month")
    data = fleet_json(capsys, tmp_path / "month", "--since", f"{MIN_NIGHTS - 2}d")
    assert data["drifts"] == [] and f"no node with {MIN_NIGHTS} nights" in data["window"]


def test_one_bad_night_or_a_scattered_node_is_no_drift() -> None:
    flat = [100.0, 101.0, 99.0, 100.5, 99.5, 100.0, 100.2, 99.8, 100.1, 99.9]
    values = {f"n{i}": [v * (1 + 0.001 * i) for v in flat] for i in range(5)}
    values["dip"] = [*flat[:5], 60.0, *flat[6:]]  # one bad night, then back
    values["noisy"] = [100, 80, 115, 85, 110, 82, 112, 88, 104, 79]  # scatters 15 %, trends a little down
    assert drifts(series(values), 10.0) == []
    values["slow"] = [100 * 0.97**n for n in range(10)]
    found = drifts(series(values), 10.0)
    assert [d.host for d in found] == ["slow"] and found[0].pct_per_night == pytest.approx(-3.0, abs=0.1)


def test_of_two_runs_of_one_night_the_later_counts() -> None:
    first = dt.date(2026, 10, 1)
    values = [
        NightValue(
            f"n{i}", "cpu", "c", "busbw_gbps", first + dt.timedelta(days=d), 10.0, f"2026-10-{d + 1:02}T01"
        )
        for i in range(4)
        for d in range(8)
    ]
    # n0 ran again later each night, slower every time: that run is the night's
    values += [
        NightValue(
            "n0",
            "cpu",
            "c",
            "busbw_gbps",
            first + dt.timedelta(days=d),
            10.0 * 0.9**d,
            f"2026-10-{d + 1:02}T05",
        )
        for d in range(8)
    ]
    assert [d.host for d in drifts(values, 10.0)] == ["n0"]
    assert drifts([v for v in values if v.at.endswith("T01")], 10.0) == []


def test_fit_and_since() -> None:
    slope, error = fit([(x, 2.0 * x + 1) for x in range(6)])
    assert slope == pytest.approx(2.0) and error == pytest.approx(0.0, abs=1e-12)
    slope, error = fit([(0, 0.0), (1, 1.0), (2, 0.0), (3, 1.0)])
    assert error > 0 and math.isfinite(slope)
    assert parse_since("30d", NOW) == dt.date(2026, 10, 29)
    assert parse_since("2w", NOW) == dt.date(2026, 11, 14)
    assert parse_since("36h", NOW) == dt.date(2026, 11, 26)
    assert parse_since("2026-11-01", NOW) == dt.date(2026, 11, 1)
    for bad in ("", "30", "d", "0d", "-3d", "99999d", "yesterday", "2026-13-01"):
        with pytest.raises(ValueError):
            parse_since(bad, NOW)


@pytest.mark.parametrize("since", ["30", "0d", "last month", "2026-02-30"])
def test_a_bad_since_is_one_line(capsys, tmp_path: Path, since: str) -> None:
    Month(nights=1, nodes=2).write(tmp_path)
    assert main(["fleet", str(tmp_path), "--since", since]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "--since" in err


def test_the_html_page_has_the_drift(capsys, tmp_path: Path) -> None:
    Month(nodes=4, nights=8, decline=0.05).write(tmp_path / "state")
    page = tmp_path / "fleet.html"
    assert main(["fleet", str(tmp_path / "state"), "--since", "8d", "--html", str(page)]) == 0
    capsys.readouterr()
    html = page.read_text()
    assert "<h2>Drifting across nights</h2>" in html and '<td class="bad">node-3</td>' in html
    assert "8 night(s)" in html

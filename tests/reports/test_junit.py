"""JUnit XML: one testcase per case, validated against reports/junit.xsd (the format Jenkins and GitLab read)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

import pytest

from ds_doctor.cli import main
from ds_doctor.reports.junit import render_junit
from ds_doctor.reports.model import Outcome
from tests.reports.samples import a_report, case, every_outcome

xmlschema = pytest.importorskip("xmlschema")
SCHEMA = xmlschema.XMLSchema(str(resources.files("reports").joinpath("junit.xsd")))


def test_every_outcome_maps_to_valid_junit() -> None:
    xml = render_junit(a_report(every_outcome()))
    SCHEMA.validate(xml)
    root = ET.fromstring(xml)
    assert {k: root.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "7",
        "failures": "1",
        "errors": "2",
        "skipped": "1",
    }
    assert [s.get("name") for s in root] == ["zero_offload", "frozen_param_names"]
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert cases["zero_offload[z3-opt-bf16-ws2]"].find("failure").get("type") == "fail"
    assert "fp32_partition_placement" in cases["zero_offload[z3-opt-bf16-ws2]"].find("failure").text
    assert cases["frozen_param_names[boom-ws1]"].find("error").get("type") == "error"
    assert cases["frozen_param_names[hang-ws1]"].find("error").get("type") == "timeout"
    assert cases["frozen_param_names[no-gpu-ws1]"].find("skipped").get("message") == "needs 2 ranks"
    assert list(cases["frozen_param_names[z2-healthy-ws1]"]) == []
    assert "xfail" in cases["frozen_param_names[z2-set-tensor-ws1]"].find("system-out").text
    assert "hf_" not in xml  # built from the report: already scrubbed


def test_the_schema_is_not_vacuous() -> None:
    xml = render_junit(a_report([case(Outcome.PASS, "a")]))
    SCHEMA.validate(xml)
    for broken in (
        xml.replace(' tests="1"', "", 1),
        xml.replace("<testcase ", '<testcase bogus="1" ', 1),
        xml.replace('time="0.250"', 'time="-1"', 1),
    ):
        assert not SCHEMA.is_valid(broken)


def test_run_writes_junit_and_rejects_a_bad_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    junit = tmp_path / "ds-doctor.xml"
    assert main(["run", "--level", "1", "--out", str(tmp_path), "--junit", str(junit)]) == 0
    SCHEMA.validate(junit.read_text())
    assert "JUnit XML:" in capsys.readouterr().out
    for bad in (tmp_path, tmp_path / "missing-dir" / "x.xml"):
        assert main(["run", "--level", "1", "--out", str(tmp_path), "--junit", str(bad)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("ds-doctor: error:") and "--junit" in err and len(err.strip().splitlines()) == 1


def test_the_suites_time_is_the_runs_wall_time() -> None:
    """Cases run side by side on ranks: the sum of their durations is no run's time; the report's start to end is."""
    import dataclasses
    import xml.etree.ElementTree as ET

    from ds_doctor.reports.junit import render_junit
    from tests.reports.samples import a_report

    report = dataclasses.replace(
        a_report([]), started_at="2026-11-21T12:00:00Z", finished_at="2026-11-21T12:01:05Z"
    )
    assert ET.fromstring(render_junit(report).split("\n", 1)[1]).attrib["time"] == "65.000"

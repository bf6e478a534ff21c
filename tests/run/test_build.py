"""Building the report (the one place every string is scrubbed) and writing its files."""

from __future__ import annotations

import json
from pathlib import Path

from ds_doctor.reports.model import Report
from ds_doctor.run.build import clean_result, report_basename, shown_result, write_reports
from tests.reports.samples import TOKEN, a_failed_case, a_report


def test_every_string_is_scrubbed_where_the_report_is_built() -> None:
    report = a_report([a_failed_case()])
    text = report.to_json()
    assert TOKEN not in text and "--token=<redacted>" in text
    assert report.command == ["ds-doctor", "run", "--token=<redacted>"]
    assert report.results[0].reason == "bad placement; token <redacted>"


def test_a_result_shown_before_the_report_exists_is_cleaned_the_same_way() -> None:
    shown = clean_result(a_failed_case())
    assert shown == a_report([a_failed_case()]).results[0]
    assert TOKEN not in str(clean_result(a_failed_case(), anonymized=True, host="node1").to_dict())


def test_a_finished_case_is_shown_by_its_line_and_its_rows_wait_for_the_report() -> None:
    case = a_failed_case()
    shown = shown_result(case, anonymized=True, host="node1")
    assert (shown.case, shown.outcome, shown.reason) == (
        case.case,
        case.outcome,
        "bad placement; token <redacted>",
    )
    assert case.device_map and not shown.device_map and not shown.findings and not shown.ranks


def test_reports_are_written_beside_each_other_never_over(tmp_path: Path) -> None:
    report = a_report([a_failed_case()])
    first, second = write_reports(report, tmp_path), write_reports(report, tmp_path, suffix="")
    assert first["json"].name == f"{report_basename(report)}.json" == "ds-doctor-node1-20261121T120000Z.json"
    assert second["json"] != first["json"] and second["json"].exists()
    assert Report.from_dict(json.loads(first["json"].read_text())) == report
    markdown = first["markdown"].read_text()
    assert f"`{first['json'].name}`" in markdown  # the ticket says which file holds the rest

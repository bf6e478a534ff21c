"""The catalog, measured: the records `make verify-catalog` wrote hold the entries' ranges to what was seen (a
record that contradicts `affected` fails here, so the range gets fixed), and the data file is checked."""

from __future__ import annotations

import pytest

from ds_doctor.knowledge import catalog
from ds_doctor.knowledge.measured import HEADER, Measured, contradictions, for_issue, parse, shipped
from ds_doctor.releases.verify import PLAN, ends_of_range
from ds_doctor.reports.model import Verdict


def record(version: str, outcome: str, issue: str = "ds_x") -> Measured:
    return Measured(
        issue,
        "deepspeed",
        version,
        outcome,
        "zero3_hooks[delegating-wrapper-ws2]",
        "cpu",
        "2.13.0",
        "2026-11-24",
    )


def test_every_measured_record_agrees_with_its_entrys_range() -> None:
    assert contradictions({i.id: i.affected for i in catalog.ISSUES}, shipped()) == []


def test_every_planned_entry_is_measured_at_both_ends_of_its_range() -> None:
    """Reproduced inside its range, and not at its fix where it has one (an entry no release fixes has one end)."""
    for issue_id, plan in PLAN.items():
        entry = next(i for i in catalog.ISSUES if i.id == issue_id)
        seen = {r.version: r.outcome for r in for_issue(issue_id) if r.device == plan.device}
        if entry.fixed_in:
            assert seen.get(plan.fixed_end or entry.fixed_in) == "not_reproduced", (issue_id, seen)
        assert any(o == "reproduced" for o in seen.values()), (issue_id, seen)  # the last affected release


def test_a_contradiction_names_the_record_and_the_range() -> None:
    ranges = {"ds_x": "<0.19.3"}
    assert (
        contradictions(
            ranges,
            [
                record("0.19.2", "reproduced"),
                record("0.19.3", "not_reproduced"),
                record("0.14.0", "does_not_import"),
            ],
        )
        == []
    )
    (said,) = contradictions(ranges, [record("0.16.4", "not_reproduced")])
    assert (
        said.startswith("ds_x: deepspeed 0.16.4 not reproduced here (cpu, 2026-11-24,") and "<0.19.3" in said
    )
    (said,) = contradictions(ranges, [record("0.19.5", "reproduced")])
    assert "0.19.5 reproduced here" in said
    assert contradictions({}, [record("1.0", "reproduced")]) == [
        "ds_x: measured, but no such entry in the catalog"
    ]
    # "every version", yet it did not show
    assert contradictions({"ds_x": ""}, [record("1.0", "not_reproduced")])


def test_the_data_file_round_trips_and_refuses_what_is_not_a_record() -> None:
    records = (record("0.19.2", "reproduced"), record("0.19.3", "not_reproduced"))
    assert parse(HEADER + "".join(r.to_toml() for r in records)) == records
    with pytest.raises(ValueError, match="outcome 'maybe'"):
        parse(HEADER + record("0.19.2", "maybe").to_toml())
    with pytest.raises(ValueError, match="needs exactly"):
        parse(HEADER + "\n[[measured]]\nissue = 'ds_x'\n")
    with pytest.raises(ValueError, match="format"):
        parse("format = 2\n")


def test_the_ends_of_a_range_are_the_last_affected_and_the_fix() -> None:
    assert ends_of_range("0.19.3", ["0.16.4", "0.19.1", "0.19.2", "0.19.3", "0.19.4"]) == ["0.19.2", "0.19.3"]
    assert ends_of_range("1.0", ["1.0"]) == ["1.0"]


def test_docs_known_issues_is_the_generated_table() -> None:
    from pathlib import Path

    from ds_doctor.releases.verify import table

    docs = Path(__file__).resolve().parents[2] / "docs" / "known-issues.md"
    assert docs.read_text() == table(list(shipped()), list(catalog.ISSUES)), (
        "python -m ds_doctor.releases.verify --table"
    )


def test_every_entry_with_a_range_is_measured_or_says_why_not() -> None:
    from ds_doctor.releases.verify import NOT_HERE

    ranged = {i.id for i in catalog.ISSUES if i.affected}
    assert ranged - set(PLAN) - set(NOT_HERE) == set() and not set(PLAN) & set(NOT_HERE)


def test_a_verdict_says_whether_its_range_was_measured() -> None:
    known = {i.id: i for i in catalog.ISSUES}
    ref = known["ds_z3_ds_grads_remaining_attr_missing"].to_ref(Verdict.AFFECTED)
    assert (
        ref.affected_versions
        == "deepspeed >=0.16.5,<0.19.3 (measured here at 0.16.4, 0.16.5, 0.19.2, 0.19.3)"
    )
    ref = known["prodigy_group_tensors_left_on_cpu"].to_ref(Verdict.AFFECTED)
    assert ref.affected_versions.endswith("<1.9.2 (from upstream reports)")


def test_a_matrix_entry_is_reproduced_where_a_setting_fails_naming_it() -> None:
    from ds_doctor.releases.verify import matrix_records

    def result(case: str, outcome: str, issue: str | None = None) -> dict:
        named = {"id": issue} if issue else None
        return {"case": case, "outcome": outcome, "known_issue": named, "device_kind": "cpu"}

    def outcome(*results: dict) -> list[str]:
        return [
            r.outcome for r in matrix_records(list(results), "ds_x", "deepspeed", "0.18.9", "2.13.0", "today")
        ]

    assert outcome(result("a", "pass"), result("b", "fail", "ds_x")) == ["reproduced"]
    assert outcome(result("a", "pass"), result("b", "pass")) == ["not_reproduced"]
    # another entry's bug on the same release: this one did not show
    assert outcome(result("a", "pass"), result("b", "fail", "ds_y")) == ["not_reproduced"]
    # an error that names the entry (an error's entry the matrix meets) shows it; one naming another does not
    assert outcome(result("a", "pass"), result("b", "error", "ds_x")) == ["reproduced"]
    assert outcome(result("a", "pass"), result("b", "error", "ds_y")) == ["not_reproduced"]
    # a divergence nothing names, an error nothing names, or nothing ran: no record either way
    assert outcome(result("a", "pass"), result("b", "fail")) == []
    assert outcome(result("a", "error")) == []
    assert outcome() == []


def test_a_release_s_results_are_its_overlay_s_alone() -> None:
    from ds_doctor.releases.verify import ran_on

    report = {
        "results": [
            {"case": "a", "stack": None},
            {"case": "b", "stack": "deepspeed==0.19.1"},
            {"case": "c", "stack": "deepspeed==0.19.10"},
            {"case": "d", "stack": "transformers==4.49.0+huggingface-hub==0.30.2"},
        ]
    }
    assert [r["case"] for r in ran_on(report, None)] == ["a"]
    assert [r["case"] for r in ran_on(report, "deepspeed==0.19.1")] == ["b"]  # not 0.19.10's
    assert [r["case"] for r in ran_on(report, "transformers==4.49.0")] == ["d"]

"""What a reader compares is a field, not a message prefix: a finding's data (the equivalence family's step, stage,
quantity, relative error and tolerance; a hang's rank, group, sequence and collective), the notes a probe marks for
the ticket, and `diff` reading both."""

from __future__ import annotations

import dataclasses

import pytest

from ds_doctor.checks.baseline import diff_reports
from ds_doctor.checks.equivalence import Tolerance, continuation_finding, divergence_finding, first_divergence
from ds_doctor.checks.hang import collective_mismatch, missing_rank
from ds_doctor.reports.markdown import render_case
from ds_doctor.reports.model import CaseResult, Finding, Outcome, validate
from tests.checks.test_baseline import report
from tests.checks.test_equivalence import step


def averaged_twice() -> Finding:
    steps = [
        step((0.6, 1.2), (0.4, 0.8), {"w": (0.0, 2.0)}),
        step((0.55, 1.1), (0.35, 0.7), {"w": (1e-3, 2.0)}),
    ]
    return divergence_finding(
        first_divergence(steps, Tolerance()),
        2,
        "ddp",
        first_update=first_divergence(steps, Tolerance(), ("update",)),
    )


def test_a_divergence_carries_its_step_stage_quantity_error_and_tolerance() -> None:
    data = averaged_twice().data
    assert (data["step"], data["stage"], data["quantity"], data["steps"]) == (1, "loss", "loss", 2)
    assert data["relative_error"] == pytest.approx(0.5) and data["tolerance"] > 0
    assert (data["route"], data["reference"]) == (0.6, 1.2)
    assert data["first_update"]["quantity"] == "w" and data["first_update"]["step"] == 2
    (resumed,) = continuation_finding(
        first_divergence([step((1.0, 1.0), None, {"w": (0.3, 1.0)})], Tolerance()), 2, 4, "DeepSpeed"
    )
    assert (resumed.data["step"], resumed.data["resumed_from"], resumed.data["quantity"]) == (3, 2, "w")


def test_a_hang_finding_names_rank_group_sequence_and_collective_as_fields() -> None:
    missing = missing_rank(1, "default_pg", "all_reduce", 7, [0, 2, 3], [])
    assert missing.data == {
        "rank": 1,
        "group": "default_pg",
        "seq": 7,
        "collective": "all_reduce",
        "waiting": [0, 2, 3],
    }
    mismatch = collective_mismatch("default_pg", 4, {0: "all_reduce of [[8]] Float", 1: "broadcast"}, 1, "op")
    assert (mismatch.data["rank"], mismatch.data["seq"], mismatch.data["kind"]) == (1, 4, "op")


def case(findings: tuple[Finding, ...] = (), **notes: object) -> CaseResult:
    return CaseResult(
        "equivalence",
        "equivalence[ddp-ws2]",
        "smoke",
        2,
        2,
        "cpu",
        Outcome.FAIL,
        1.0,
        findings=findings,
        notes=dict(notes),
    )


def test_data_and_marked_notes_survive_the_report_and_its_schema() -> None:
    marked = dataclasses.replace(
        case((averaged_twice(),), route="DDP", secret_sauce="x"), shown_notes=("route",)
    )
    built = report([marked])
    validate(built.to_dict())
    back = type(built).from_dict(built.to_dict()).results[0]
    assert back.findings[0].data == marked.findings[0].data and back.shown_notes == ("route",)


def test_the_markdown_shows_the_notes_the_probe_marked_and_no_other() -> None:
    text = "\n".join(
        render_case(dataclasses.replace(case(route="DDP", tracked_before=["a"]), shown_notes=("route",)))
    )
    assert "**Route:** DDP" in text and "Tracked before" not in text
    legacy = case(route="DDP", tracked_before=["a"]).to_dict()
    del legacy["shown_notes"]  # a report written before probes marked their notes shows what it showed then
    assert CaseResult.from_dict(legacy).shown_notes == ("route", "tracked_before")


def test_diff_reads_where_a_divergence_is_and_calls_an_earlier_one_a_regression() -> None:
    later = averaged_twice()
    earlier_data = {**later.data, "step": 1}
    later = dataclasses.replace(later, data={**later.data, "step": 2})
    before, after = case((later,)), case((dataclasses.replace(later, data=earlier_data),))
    (change,) = [c for c in diff_reports(report([before]), report([after])).changes if c.kind == "finding"]
    assert (change.before, change.after, change.regression) == ("step 2, loss", "step 1, loss", True)
    assert not [c for c in diff_reports(report([after]), report([before])).changes if c.regression]
    same = diff_reports(report([before]), report([case((later,))]))
    assert not [
        c for c in same.changes if c.kind == "finding"
    ]  # the same place: no change, whatever the prose

"""Merging a case's rank lines: the worst outcome wins, findings and records from every rank, and the known
issue's verdict from what showed, what was caught, or the installed version."""

from __future__ import annotations

from typing import Any

import pytest

from ds_doctor.knowledge.triage import triage
from ds_doctor.probe.registry import find_case
from ds_doctor.reports.model import ErrorInfo, Finding, Outcome, Severity, TensorRecord, Verdict
from ds_doctor.run.merge import merge_case
from ds_doctor.run.pipeline import planned_case
from ds_doctor.rundir import PlannedCase, RankLine

VERSIONS = {"deepspeed": "0.19.8", "accelerate": "1.15.0", "torch": "2.13.0"}
S1 = "frozen_param_names[z2-set-tensor-ws2]"
S2 = "zero_offload[z3-opt+param-bf16-ws2]"


def planned(case_id: str) -> PlannedCase:
    return planned_case(find_case(case_id), "cpu")


def line(case_id: str, rank: int, outcome: Outcome, **fields: Any) -> RankLine:
    return RankLine(case_id, rank, 2, outcome, **fields)


# a misuse that breaks on every release: the library's
@pytest.mark.parametrize(
    ("caught", "shown", "outcome", "verdict"),
    [
        (True, True, Outcome.XFAIL, Verdict.REPRODUCED),
        (False, True, Outcome.FAIL, Verdict.AFFECTED),  # shown and not caught: a real failure
        (False, False, Outcome.XPASS, Verdict.NOT_AFFECTED),
    ],
)
def test_a_reproduce_case_gets_its_verdict_from_what_showed(
    caught: bool, shown: bool, outcome: Outcome, verdict: Verdict
) -> None:
    finding = Finding("param_name_map", Severity.ERROR, "emb.weight is stale", rank=1)
    lines = [
        line(
            S1,
            1,
            outcome,
            findings=(finding,) if caught else (),
            known_issue="ds_frozen_param_not_in_param_names",
            issue_shown=shown,
            notes={"showed": ["save raised"]} if shown else {},
        ),
        line(
            S1,
            0,
            Outcome.XPASS if outcome == Outcome.XPASS else outcome,
            known_issue="ds_frozen_param_not_in_param_names",
        ),
    ]
    result = merge_case(planned(S1), lines, VERSIONS)
    assert result.outcome == outcome and [r.rank for r in result.ranks] == [0, 1]
    assert (
        result.known_issue.id == "ds_frozen_param_not_in_param_names"
        and result.known_issue.verdict == verdict
    )
    assert result.findings == ((finding,) if caught else ())


@pytest.mark.parametrize(
    ("deepspeed", "verdict"), [("0.17.0", Verdict.AFFECTED), ("0.19.8", Verdict.REPRODUCED)]
)
def test_a_trap_reproduced_on_purpose_concerns_this_stack_only_inside_its_version_range(
    deepspeed: str, verdict: Verdict
) -> None:
    """ds_z3_ds_grads_remaining_attr_missing is >=0.16.5,<0.19.3: at 0.17.0 the reader's stack has the bug; at 0.19.8
    the reproduction showed it anyway (as designed) and that is a fact about the library, never `affected`."""
    finding = Finding("zero3_hooks_own_state", Severity.ERROR, "borrowed hook state", rank=0)
    lines = [
        line(
            S1,
            r,
            Outcome.XFAIL,
            findings=(finding,),
            known_issue="ds_z3_ds_grads_remaining_attr_missing",
            issue_shown=True,
        )
        for r in (0, 1)
    ]
    result = merge_case(planned(S1), lines, {**VERSIONS, "deepspeed": deepspeed})
    assert result.known_issue is not None and result.known_issue.verdict == verdict


def test_the_worst_rank_decides_and_measures_come_from_the_first_rank_that_has_them() -> None:
    record = TensorRecord(
        1, "after_step", "fp32_partition", "optimizer.x", None, "cpu", "float32", (4,), 4, 16
    )
    lines = [
        line(S2, 0, Outcome.PASS, measures={"tflops": 2.0}, notes={"a": 0}, duration_s=1.0),
        line(
            S2,
            1,
            Outcome.FAIL,
            reason="1 fp32 partition(s) not on cpu",
            device_map=(record,),
            measures={"tflops": 1.0},
            notes={"a": 1, "b": 1},
            duration_s=3.0,
        ),
    ]
    result = merge_case(planned(S2), lines, VERSIONS)
    assert (result.outcome, result.reason, result.duration_s) == (
        Outcome.FAIL,
        "1 fp32 partition(s) not on cpu",
        3.0,
    )
    assert (
        result.device_map == (record,)
        and result.measures == {"tflops": 2.0}
        and result.notes == {"a": 0, "b": 1}
    )
    # the family's own issue, judged by the installed version when nothing showed
    assert (result.known_issue.id, result.known_issue.verdict) == (
        "ds_z3_offload_gradnorm_device_mismatch",
        Verdict.NOT_AFFECTED,
    )


@pytest.mark.parametrize(
    ("printed", "verdict"),
    [
        (
            "",
            Verdict.POSSIBLY,
        ),  # a SIGKILL alone names no OOM: torchrun's agent kills ranks left after a failure
        ("\n[ 812.4] Out of memory: Killed process 12 (python) total-vm:81920000kB", Verdict.AFFECTED),
    ],
)
def test_an_error_is_classified_by_the_matcher_triage_uses(printed: str, verdict: Verdict) -> None:
    """A run and `ds-doctor triage` say the same of one text (ds_doctor.knowledge.matching): was `affected` for a
    SIGKILL alone, where triage said "possibly" without the OOM killer's line."""
    crash = line(
        S2,
        1,
        Outcome.ERROR,
        reason="rank 1 killed by SIGKILL in stage 'train'",
        signal="SIGKILL",
        exit_code=-9,
        stderr_tail="exitcode  : -9 (pid: 12)" + printed,
    )
    result = merge_case(planned(S2), [line(S2, 0, Outcome.PASS), crash], VERSIONS)
    assert result.outcome == Outcome.ERROR
    assert (result.known_issue.id, result.known_issue.verdict) == ("torchrun_child_sigkill", verdict)
    assert (result.known_issue.confirm is not None) == (verdict == Verdict.POSSIBLY)
    assert "dmesg" in (result.known_issue.confirm or "dmesg")
    assert result.ranks[1].signal == "SIGKILL" and result.ranks[1].exit_code == -9
    triaged = triage(crash.stderr_tail or "", VERSIONS)
    assert triaged[0].issue.id == "torchrun_child_sigkill" and triaged[0].possibly == (
        verdict == Verdict.POSSIBLY
    )


def test_an_unrecognised_error_is_not_given_the_familys_issue() -> None:
    """An exception no signature matches stays unclassified, even where the family's issue is affected by version."""
    error = ErrorInfo(
        "ValueError",
        "the batch this rank built has no rows",
        "Traceback (most recent call last):\nValueError: the batch this rank built has no rows",
    )
    result = merge_case(
        planned(S2),
        [line(S2, 0, Outcome.ERROR, error=error, reason="ValueError")],
        {**VERSIONS, "deepspeed": "0.14.2"},
    )
    assert result.outcome == Outcome.ERROR and result.known_issue is None
    passed = merge_case(planned(S2), [line(S2, 0, Outcome.PASS)], {**VERSIONS, "deepspeed": "0.14.2"})
    assert (passed.known_issue.id, passed.known_issue.verdict) == (
        "ds_z3_offload_gradnorm_device_mismatch",
        Verdict.AFFECTED,
    )


def test_an_error_of_a_class_names_the_class_and_no_verdict_on_the_stack() -> None:
    """An ImportError no entry of its own cause matches is the import-error class: named, with its remedy, but a class
    says what kind of failure it was, not that this stack is affected by a known bug (the verdict stays unknown)."""
    error = ErrorInfo(
        "ImportError",
        "cannot import name 'x' from 'y'",
        "Traceback (most recent call last):\nImportError: cannot import name 'x' from 'y' (/opt/venv/y/__init__.py)",
    )
    result = merge_case(
        planned(S2),
        [line(S2, 0, Outcome.ERROR, error=error, reason="ImportError")],
        {**VERSIONS, "deepspeed": "0.14.2"},
    )
    assert result.outcome == Outcome.ERROR
    assert (result.known_issue.id, result.known_issue.verdict) == ("python_import_mismatch", Verdict.UNKNOWN)


def test_the_traceback_of_a_rank_reaches_the_case() -> None:
    error = ErrorInfo(
        "ValueError", "planted", "Traceback (most recent call last):\n  ...\nValueError: planted"
    )
    result = merge_case(
        planned(S2),
        [line(S2, 0, Outcome.ERROR, error=error, reason="ValueError: planted"), line(S2, 1, Outcome.PASS)],
        VERSIONS,
    )
    assert result.ranks[0].traceback.startswith("Traceback") and result.reason == "ValueError: planted"


def test_what_raised_is_classified_before_what_a_rank_printed() -> None:
    """On a node with torch alone, torch warns "Failed to initialize NumPy" at every import: that warning in the
    stderr tail must not name the error of an exception that says what it is."""
    error = ErrorInfo(
        "ValueError",
        "bad shapes",
        'Traceback (most recent call last):\n  File "x.py"\nValueError: bad shapes',
    )
    warned = "UserWarning: Failed to initialize NumPy: No module named 'numpy'"
    result = merge_case(
        planned(S2),
        [line(S2, 0, Outcome.ERROR, reason="ValueError: bad shapes", error=error, stderr_tail=warned)],
        VERSIONS,
    )
    assert result.known_issue is None or result.known_issue.id != "torch_numpy_missing"
    # a rank that died with nothing raised is still read from what it printed
    died = merge_case(
        planned(S2), [line(S2, 0, Outcome.ERROR, reason="exit code 1", stderr_tail=warned)], VERSIONS
    )
    assert died.known_issue is not None and died.known_issue.id == "torch_numpy_missing"


def test_a_possibly_verdict_says_how_to_confirm_it_in_the_markdown_and_the_html() -> None:
    from ds_doctor.reports.html import render_html
    from ds_doctor.reports.markdown import render_markdown
    from ds_doctor.reports.model import validate
    from tests.reports.samples import a_report

    crash = line(S2, 1, Outcome.ERROR, reason="rank 1 killed by SIGKILL", signal="SIGKILL", exit_code=-9)
    result = merge_case(planned(S2), [line(S2, 0, Outcome.PASS), crash], VERSIONS)
    report = a_report([result])
    validate(report.to_dict())
    for text in (render_markdown(report), render_html(report)):
        assert "possibly" in text and "To confirm: dmesg" in text
    assert "Matched by its message." in render_markdown(report)


def test_a_case_matched_by_structure_says_how_in_every_format() -> None:
    """A rank that died printing a DeepSpeed op's failed compile, without torch's error line: the case is possibly
    the op build failure, and the JSON, the Markdown, the HTML and the console each say it was matched by the lines
    printed before the error."""
    from ds_doctor.reports.console import compact_summary
    from ds_doctor.reports.html import render_html
    from ds_doctor.reports.markdown import render_markdown
    from ds_doctor.reports.model import validate
    from tests.reports.samples import a_report

    printed = "[2/3] c++ -c /x/site-packages/deepspeed/ops/csrc/adam/cpu_adam.cpp -o cpu_adam.o\nFAILED: cpu_adam.o\n"
    died = line(S2, 0, Outcome.ERROR, reason="exit code 1", stderr_tail=printed)
    result = merge_case(planned(S2), [died], VERSIONS)
    issue = result.known_issue
    assert issue is not None and (issue.id, issue.verdict, issue.match) == (
        "ds_jit_op_compile_failed",
        Verdict.POSSIBLY,
        "banner",
    )
    report = a_report([result])
    validate(report.to_dict())
    assert report.to_dict()["results"][0]["known_issue"]["match"] == "banner"
    for text in (render_markdown(report), render_html(report)):
        assert "Matched by what is printed before it" in text and "To confirm:" in text
    assert "[possibly ds_jit_op_compile_failed, by banner]" in "\n".join(compact_summary(report))

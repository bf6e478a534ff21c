"""A report whose notes lie about their types never breaks its renderers: a case's notes are free-form JSON (the
schema leaves them open), so what the Markdown and HTML read from them (the equivalence family's steps, a hung
case's forensics, what a reproduced case showed) is checked where it is read. A value of the wrong shape is shown as
far as it goes, or left out; `ds-doctor report FILE` ends in a rendered report (exit 0 or 1), never exit 3."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ds_doctor.cli import main
from ds_doctor.reports.hang import CollectivePosition
from ds_doctor.reports.model import CaseResult, Outcome, RankSummary, Verdict
from ds_doctor.reports.views import StepTable, view_of
from tests.reports.samples import a_report, an_equivalence_case, case, issue

HUGE = 10**400  # valid JSON, an int in Python, beyond any float: float(HUGE) raises OverflowError


def a_hung_case() -> CaseResult:
    """A timed-out case whose ranks stood in a collective, with the forensics note that names where that came from."""
    return case(
        Outcome.TIMEOUT,
        "hang",
        world_size=2,
        reason="timed out after 6 s on rank 0",
        ranks=(
            RankSummary(
                0,
                "timeout",
                "step",
                collectives=(
                    CollectivePosition("0:default_pg", 1, "all_reduce", 2, "in [[1]] Float", "scheduled"),
                ),
            ),
        ),
        notes={"forensics": {"collectives_from": "torch Flight Recorder"}},
    )


def a_reproduced_case() -> CaseResult:
    """A reproduce case that showed its known issue on purpose, on a release the issue affects (the Markdown's table
    of reproduced cases), with what went wrong for real."""
    return case(
        Outcome.XFAIL,
        "z2-set-tensor",
        reason="emb.weight is not a key",
        known_issue=issue("ds_frozen_param_not_in_param_names", Verdict.AFFECTED),
        notes={"showed": ["emb.weight is not a key of the saved state"]},
    )


def forged_report(tmp_path: Path, notes: dict[str, dict[str, Any]]) -> Path:
    """A report of a hung, a reproduced and an equivalence case, each case's notes updated by `notes[probe[name]]`
    in its JSON (where a report's author puts anything)."""
    data = a_report([a_hung_case(), a_reproduced_case(), an_equivalence_case()]).to_dict()
    for result in data["results"]:
        result["notes"].update(notes.get(result["case"].split("-ws")[0], {}))
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(data))
    return path


def rendered(capsys: pytest.CaptureFixture[str], path: Path, out: Path) -> str:
    """`ds-doctor report PATH`: rendered, never an internal error; its Markdown."""
    out.mkdir()
    capsys.readouterr()
    code = main(["report", str(path), "--out", str(out)])
    err = capsys.readouterr().err
    assert code in (0, 1), (code, err[-2000:])
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    (markdown,) = out.glob("*.md")
    assert len(list(out.glob("*.html"))) == 1
    return markdown.read_text()


HANG, REPRODUCED, EQUIVALENCE = (
    "frozen_param_names[hang",
    "frozen_param_names[z2-set-tensor",
    "equivalence[trainer-num-items",
)


@pytest.mark.parametrize("forensics", ["x", 5, ["torch Flight Recorder"], True])
def test_forensics_that_are_no_object_name_no_source(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, forensics: Any
) -> None:
    markdown = rendered(capsys, forged_report(tmp_path, {HANG: {"forensics": forensics}}), tmp_path / "out")
    assert "**Collectives when it hung** (from the collective record):" in markdown


def test_forensics_as_a_hung_case_writes_them_name_their_source(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    markdown = rendered(capsys, forged_report(tmp_path, {}), tmp_path / "out")
    assert "**Collectives when it hung** (from torch Flight Recorder):" in markdown


@pytest.mark.parametrize(
    ("showed", "shown"),
    [
        (5, ["5"]),  # a lone number: a list of one
        ("the whole sentence", ["the whole sentence"]),  # a lone string: a list of one, not its first letter
        ({"a": 1}, []),  # an object: nothing shown
        ([], []),
        ([7, "second"], ["7", "second"]),  # the table shows the first; a failed case each
    ],
)
def test_what_a_case_showed_is_shown_as_far_as_it_goes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, showed: Any, shown: list[str]
) -> None:
    """In the table of reproduced cases (the first) and in a failed case's block (each)."""
    forged = forged_report(tmp_path, {REPRODUCED: {"showed": showed}, HANG: {"showed": showed}})
    markdown = rendered(capsys, forged, tmp_path / "out").splitlines()
    header = markdown.index("| case | outcome | caught by | what went wrong for real |")
    assert markdown[header + 2].endswith(f"| {shown[0]} |" if shown else "|  |"), markdown[header + 2]
    listed = markdown.index("**What went wrong for real:**") + 2 if shown else None
    assert (markdown[listed : listed + len(shown)] if listed else []) == [f"- {item}" for item in shown]
    assert ("**What went wrong for real:**" in markdown) == bool(shown)


def _steps(route: Any) -> dict[str, Any]:
    """The equivalence note with the first step's route loss set to `route`."""
    steps = json.loads(json.dumps(an_equivalence_case().notes["equivalence"]["steps"]))
    steps[0]["loss"]["route"] = route
    steps[1]["grad_norm"] = {"route": HUGE, "reference": -HUGE}
    return {"equivalence": {"tolerance": "16 x u(float32) x steps, relative", "steps": steps}}


def test_an_integer_beyond_any_float_in_the_steps_is_left_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The steps' numbers are a float each or nothing: the step chart and the table draw the rest."""
    markdown = rendered(capsys, forged_report(tmp_path, {EQUIVALENCE: _steps(HUGE)}), tmp_path / "out")
    assert "Steps (relative gap; tolerance: 16 x u(float32) x steps, relative):" in markdown
    assert str(HUGE)[:40] not in markdown


def test_a_step_value_is_a_float_or_nothing() -> None:
    """An integer beyond a float and a flag are no loss (left out, the step's other quantity kept); NaN is one (a
    diverged loss, which the table shows)."""
    for route in (HUGE, True, "3.9"):
        result = an_equivalence_case()
        result.notes.update(_steps(route))
        table = view_of(result, StepTable)
        assert table is not None
        assert [sorted(step.values) for step in table.steps[:2]] == [["grad_norm"], ["loss"]], route
    result = an_equivalence_case()
    result.notes.update(_steps(math.nan))
    table = view_of(result, StepTable)
    assert table is not None and math.isnan(table.steps[0].values["loss"].route)

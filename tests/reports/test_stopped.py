"""A stopped run says so, in every format: its unfinished cases are `not_run` (never an error, never a failure, never
something that needs a look), and the report's `stopped` (the signal, how many of the planned cases finished) comes
first in the Markdown, the HTML page and the console; JUnit skips them with a message, Prometheus labels them,
`diff` and `fleet` hold nothing against them."""

from __future__ import annotations

import dataclasses
import io
import json
import xml.etree.ElementTree as ET
from importlib import resources

import pytest
from rich.console import Console

from ds_doctor.checks.baseline import diff_reports
from ds_doctor.fleet.facts import Source, build_fleet
from ds_doctor.reports.console import print_summary
from ds_doctor.reports.diff import render_diff
from ds_doctor.reports.fleet import render_fleet
from ds_doctor.reports.html import render_html
from ds_doctor.reports.junit import render_junit
from ds_doctor.reports.markdown import render_markdown
from ds_doctor.reports.model import FAILING, CaseResult, ExitCode, Outcome, Report, RunStop, validate
from ds_doctor.reports.prometheus import render_prometheus
from ds_doctor.run.build import build_report
from ds_doctor.run.recover import UNFINISHED
from tests.reports.samples import NOW, TOKEN, a_failed_case, case

SIGTERM = RunStop("SIGTERM", finished=2, planned=4)


def not_run(name: str) -> CaseResult:
    return case(Outcome.NOT_RUN, name, reason=UNFINISHED, notes={"unfinished": True})


def a_stopped_report(stopped: RunStop | None = SIGTERM, *, failed: bool = False) -> Report:
    """Two cases finished (one failed where `failed`), two never did: the run was stopped."""
    finished = [
        a_failed_case() if failed else case(Outcome.PASS, "z3-healthy"),
        case(Outcome.PASS, "z2-healthy"),
    ]
    results = [*finished, not_run("z1-healthy"), not_run("z0-healthy")]
    return build_report(
        started=NOW,
        finished=NOW,
        level=3,
        argv=("run", f"--token={TOKEN}"),
        env={"python": "3.11", "packages": {"deepspeed": "0.19.8"}, "variables": {}},
        hardware={"host": "node1", "cpus": 2, "memory_bytes": 1 << 30, "gpus": []},
        results=results,
        run_dir=None,
        stopped=stopped,
    )


def test_not_run_is_an_outcome_of_its_own_that_fails_nothing() -> None:
    report = a_stopped_report()
    assert Outcome("not_run") is Outcome.NOT_RUN and Outcome.NOT_RUN.label == "not run"
    assert Outcome.NOT_RUN not in FAILING and report.exit_code == ExitCode.OK
    assert report.summary["not_run"] == 2 and report.summary["error"] == 0
    data = json.loads(report.to_json())
    validate(data)
    assert data["stopped"] == {"signal": "SIGTERM", "finished": 2, "planned": 4}
    assert Report.from_dict(data) == report
    del data["stopped"]  # a report of before: no `stopped`, still read
    validate(data)
    assert Report.from_dict(data).stopped is None


def test_the_markdown_opens_with_the_stop_and_never_asks_a_look_at_what_did_not_run() -> None:
    text = render_markdown(a_stopped_report())
    first = text.splitlines()[:4]
    assert first[2] == (
        "**Stopped by SIGTERM after 2 of 4 cases: 2 not run.** The cases that finished are reported as usual; a case "
        "`not run` says nothing of this stack."
    ), first
    assert "**Verdict of the 2 case(s) that finished: nothing failed**" in text
    assert "need a look" not in text and "did not finish" not in text and "error" not in text.lower()
    assert "| `frozen_param_names[z1-healthy-ws1]` | not run |" in text
    assert "**not run** 2" in text


def test_the_markdown_still_shows_the_failures_of_what_finished() -> None:
    text = render_markdown(a_stopped_report(failed=True))
    assert text.index("Stopped by SIGTERM") < text.index(
        "**Verdict of the 2 case(s) that finished: 1 case(s) need"
    )
    assert "### `zero_offload[z3-opt-bf16-ws2]` — fail" in text  # the finding still shows as usual
    assert "frozen_param_names[z1-healthy-ws1]` — " not in text  # a case not run has no block


def test_a_killed_runs_report_says_it_did_not_finish() -> None:
    killed = RunStop(None, finished=2, planned=4)
    text = render_markdown(a_stopped_report(killed))
    assert text.splitlines()[2].startswith(
        "**Did not finish (the run ended without writing its report) after 2 of 4 cases: 2 not run.**"
    )
    assert "Did not finish" in render_html(a_stopped_report(killed))


def test_the_page_opens_with_the_stop_and_greys_what_did_not_run() -> None:
    page = render_html(a_stopped_report())
    stop = page.index(
        '<div class="verdict stopped"><strong>Stopped by SIGTERM after 2 of 4 cases: 2 not run.'
    )
    assert stop < page.index('<div class="verdict ok">') and "Of the 2 case(s) that finished:" in page
    assert '<span class="outcome o-not_run">not run</span>' in page and ".o-not_run {" in page
    assert "need a look" not in page and 'class="verdict bad"' not in page
    assert "verdict stopped" not in render_html(a_stopped_report(None))


def test_the_console_says_the_stop_first_and_counts_not_run_apart() -> None:
    for terminal in (False, True):
        out = io.StringIO()
        console = Console(file=out, force_terminal=terminal, width=200, color_system=None)
        print_summary(a_stopped_report(), console)
        lines = out.getvalue().splitlines()
        assert lines[0] == "Stopped by SIGTERM after 2 of 4 cases: 2 not run", lines
        assert "2 pass, 2 not run" in out.getvalue() and "failed the run" not in out.getvalue()


def test_junit_skips_what_did_not_run_with_a_message() -> None:
    xmlschema = pytest.importorskip("xmlschema")
    xml = render_junit(a_stopped_report())
    xmlschema.XMLSchema(str(resources.files("reports").joinpath("junit.xsd"))).validate(xml)
    root = ET.fromstring(xml)
    assert {k: root.get(k) for k in ("tests", "failures", "errors", "skipped")} == {
        "tests": "4",
        "failures": "0",
        "errors": "0",
        "skipped": "2",
    }
    cases = {c.get("name"): c for c in root.iter("testcase")}
    skipped = cases["frozen_param_names[z1-healthy-ws1]"].find("skipped")
    assert skipped is not None and skipped.get("message") == (
        f"{UNFINISHED} (Stopped by SIGTERM after 2 of 4 cases: 2 not run)"
    )


def test_prometheus_labels_what_did_not_run_and_says_the_run_stopped() -> None:
    parser = pytest.importorskip("prometheus_client.parser")
    metrics = {
        f.name: f.samples
        for f in parser.text_string_to_metric_families(render_prometheus(a_stopped_report()))
    }
    counts = {s.labels["outcome"]: s.value for s in metrics["ds_doctor_cases"]}
    assert counts["not_run"] == 2 and counts["error"] == counts["fail"] == counts["timeout"] == 0
    outcomes = {s.labels["case"]: s.labels["outcome"] for s in metrics["ds_doctor_case_outcome"]}
    assert outcomes["frozen_param_names[z1-healthy-ws1]"] == "not_run"
    ((stopped),) = metrics["ds_doctor_run_stopped"]
    assert stopped.labels == {"host": "node1", "signal": "SIGTERM"} and stopped.value == 1
    finished = render_prometheus(a_stopped_report(None))
    assert "ds_doctor_run_stopped" not in finished


def test_diff_says_a_case_not_run_neutrally_and_holds_it_against_nothing() -> None:
    base = a_stopped_report(None, failed=True)
    base = dataclasses.replace(base, results=(*base.results[:2], *the_rest_finished()))
    stopped = a_stopped_report(failed=True)
    diff = diff_reports(base, stopped)
    assert not diff.regressions
    changes = {c.subject: c for c in diff.changes if c.kind == "outcome"}
    assert {s: (c.before, c.after) for s, c in changes.items()} == {
        "frozen_param_names[z1-healthy-ws1]": ("pass", "not_run"),
        "frozen_param_names[z0-healthy-ws1]": ("fail", "not_run"),
    }
    assert {c.detail for c in changes.values()} == {"not run: the new run stopped before this case"}
    assert "REGRESSION" not in render_diff(diff) and "recovered" not in render_diff(diff)
    # the other way: a case the baseline never ran and that now fails is a regression, as a new failing case is
    back = diff_reports(stopped, base)
    assert [c.subject for c in back.regressions] == ["frozen_param_names[z0-healthy-ws1]"]


def the_rest_finished() -> list[CaseResult]:
    """The baseline's two cases the stopped run never got to: one passed there, one failed."""
    return [
        case(Outcome.PASS, "z1-healthy"),
        dataclasses.replace(case(Outcome.FAIL, "z0-healthy"), reason="moved"),
    ]


def test_the_fleet_does_not_count_what_did_not_run_as_a_nodes_failure() -> None:
    fleet = build_fleet([Source("/state/node1.json", a_stopped_report())], [], 10.0)
    (node,) = fleet.nodes
    assert not node.failed and not node.failing and node.outcomes["not_run"] == 2
    text = render_fleet(fleet)
    assert "2 pass, 2 not run" in text
    assert "/state/node1.json: Stopped by SIGTERM after 2 of 4 cases: 2 not run" in text

"""Every renderer against hostile text planted in every string field of a report (tests/reports/hostile.py): the
Markdown keeps its own structure, the console shows what data holds and interprets none of it, the JUnit XML
parses and validates, the Prometheus textfile parses."""

from __future__ import annotations

import functools
import io
from collections.abc import Callable
from importlib import resources

import pytest
from rich.console import Console

from ds_doctor.reports.console import (
    CaseRow,
    FamilyRow,
    RunProgress,
    case_line,
    environment_lines,
    print_list,
    print_paths,
    print_summary,
)
from ds_doctor.reports.diff import render_diff
from ds_doctor.reports.junit import render_junit
from ds_doctor.reports.markdown import render_markdown
from ds_doctor.reports.model import Report
from ds_doctor.reports.prometheus import render_prometheus
from ds_doctor.reports.triage import (
    render_findings,
    render_positions,
    render_triage,
    render_triage_markdown,
    render_versions,
)
from tests.reports.hostile import (
    CORPUS,
    ENV,
    GPU,
    console_output,
    hostile_diff,
    hostile_report,
    hostile_triage,
    junit_problems,
    markdown_problems,
    prometheus_problems,
    raw_controls,
)

PIECES = sorted(CORPUS)


@functools.lru_cache(maxsize=4)
def planted(name: str, nodes: bool = True) -> Report:
    return hostile_report(CORPUS[name], nodes=nodes)


@pytest.mark.parametrize("name", PIECES)
def test_markdown_keeps_its_structure(name: str) -> None:
    for report in (planted(name), planted(name, nodes=False)):
        for limit in (60_000, 6_000):  # the ticket cut too
            text = render_markdown(report, full_report=CORPUS[name] + "report.json", limit=limit)
            assert markdown_problems(text) == []
            assert len(text) <= limit


@pytest.mark.parametrize("name", PIECES)
def test_diff_markdown_keeps_its_structure(name: str) -> None:
    text = render_diff(hostile_diff(CORPUS[name]))
    assert markdown_problems(text) == []
    assert len(text.splitlines()) == len(render_diff(hostile_diff("x")).splitlines())  # no line from data


def write_everything(report: Report, text: str) -> Callable[[Console], None]:
    def write(console: Console) -> None:
        if not console.is_terminal:  # on a terminal the live bar draws with its own control sequences
            progress = RunProgress(console, text, 2)
            progress.planned(len(report.results), text, 2, 1)
            for result in report.results:
                progress.case_done(result)
        print_summary(report, console)
        print_list([CaseRow(text, text, 2, 2)], [FamilyRow(text, text, 1.0, (text,), (text,), text)], console)
        print_paths(console, {"json": text, "markdown": text})

    return write


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
@pytest.mark.parametrize("name", PIECES)
def test_the_console_shows_data_and_interprets_none_of_it(name: str, terminal: bool) -> None:
    report, text = planted(name), CORPUS[name]
    out = console_output(write_everything(report, text), terminal=terminal, width=400)
    assert raw_controls(out) == []
    if terminal and len(text) < 1000:  # in colour: nothing but rich's own styles
        assert (
            raw_controls(
                console_output(write_everything(report, text), terminal=True, width=400, colours=True)
            )
            == []
        )
    if name.startswith("rich_"):  # markup from data is shown as it is, never applied
        assert "[bold red]PWNED[/bold red]" in out or "[bold]x[/]" in out
        assert ("[link=http://evil.example]" in out and ":fire:" in out) or name == "rich_backslash"
    lines = environment_lines(
        {**ENV, "packages": {text: text}, "variables": {text: text}},
        {"host": text, "cpus": 2, "memory_bytes": 1, "gpus": [GPU | {"name": text}]},
    )
    assert raw_controls("\n".join(lines)) == [] and all("\n" not in line for line in lines)
    assert all(raw_controls(case_line(r)) == [] and "\n" not in case_line(r) for r in report.results)


def test_the_live_bar_shows_a_stage_as_text() -> None:
    progress = RunProgress(Console(file=io.StringIO(), force_terminal=True), "0", 2)
    progress.planned(1, "cpu", 2, 0)
    try:
        progress.stage("[bold]case\x1b[2J", 0, "stage\r")
        assert progress.progress is not None
        description = progress.progress.tasks[0].description
    finally:
        progress.close()
    assert raw_controls(description) == [] and "[bold]case" in description.replace("\\[", "[")


@pytest.mark.parametrize("name", PIECES)
def test_junit_stays_well_formed_and_valid(name: str) -> None:
    xml = render_junit(planted(name))
    assert junit_problems(xml) == []
    if len(CORPUS[name]) < 1000:
        xmlschema = pytest.importorskip("xmlschema")
        xmlschema.XMLSchema(str(resources.files("reports").joinpath("junit.xsd"))).validate(xml)


@pytest.mark.parametrize("name", PIECES)
def test_prometheus_parses(name: str) -> None:
    report = planted(name)
    assert prometheus_problems(render_prometheus(report), len(report.results)) == []


@pytest.mark.parametrize("name", PIECES)
def test_triage_text_is_one_line_per_field(name: str) -> None:
    def render(text: str) -> list[str]:
        args = hostile_triage(text)
        return [
            render_triage(args["matches"]),
            render_versions(args["versions"]),
            render_findings(args["findings"]),
            render_positions(args["positions"]),
        ]

    for hostile, benign in zip(render(CORPUS[name]), render("x"), strict=True):
        assert raw_controls(hostile) == []
        assert len(hostile.split("\n")) == len(benign.split("\n"))


@pytest.mark.parametrize("name", PIECES)
def test_triage_markdown_keeps_its_structure(name: str) -> None:
    args = hostile_triage(CORPUS[name])
    text = render_triage_markdown(args["matches"], args["findings"])
    assert markdown_problems(text) == []
    benign = hostile_triage("x")
    assert len(text.split("\n")) == len(
        render_triage_markdown(benign["matches"], benign["findings"]).split("\n")
    )

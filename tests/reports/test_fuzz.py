"""Random hostile text (the corpus's pieces mixed with arbitrary characters, surrogates and controls included) in
every string field of a report, through every renderer, with the invariants of tests/reports/hostile.py.

Derandomized, so a run here is the same run in CI. For a longer hunt: DS_DOCTOR_FUZZ_EXAMPLES=2000 pytest
tests/reports/test_fuzz.py (the default keeps the file to a few seconds)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from ds_doctor.reports.diff import render_diff
from ds_doctor.reports.junit import render_junit
from ds_doctor.reports.markdown import render_markdown
from ds_doctor.reports.prometheus import render_prometheus
from ds_doctor.reports.safe import md_cell, md_code, md_text, one_line
from ds_doctor.reports.triage import render_findings, render_positions, render_triage
from tests.reports.hostile import (
    CORPUS,
    console_output,
    hostile_diff,
    hostile_report,
    hostile_triage,
    junit_problems,
    markdown_problems,
    prometheus_problems,
    raw_controls,
)
from tests.reports.test_hostile import write_everything

EXAMPLES = int(os.environ.get("DS_DOCTOR_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: Characters that mean something to one output or another, and any character at all (lone surrogates too).
SPECIAL = st.sampled_from(
    list("`~#|<>&[]()!\\*_=-+.:;\"' \t\n\r\x00\x07\x1b\x7f\x85\x9b\u202e\u2066\u2028\ufffe\udc80")
)
ANY = st.characters(exclude_categories=())
PIECES = st.sampled_from([piece for piece in CORPUS.values() if len(piece) < 1000])
HOSTILE = st.lists(
    st.one_of(
        PIECES,
        st.text(SPECIAL, max_size=12),
        st.text(ANY, max_size=12),
        st.integers(3, 30).map(lambda n: "`" * n),
    ),
    max_size=6,
).map("".join)


def triage_text(text: str) -> str:
    args = hostile_triage(text)
    return "\n".join(
        [
            render_triage(args["matches"]),
            render_findings(args["findings"]),
            render_positions(args["positions"]),
        ]
    )


@FUZZ
@given(HOSTILE)
def test_every_renderer_keeps_its_invariants(text: str) -> None:
    report = hostile_report(text, nodes=len(text) % 2 == 0)
    for limit in (60_000, 4_000):
        assert markdown_problems(render_markdown(report, full_report=text, limit=limit)) == []
    assert markdown_problems(render_diff(hostile_diff(text))) == []
    for terminal in (True, False):
        assert (
            raw_controls(console_output(write_everything(report, text), terminal=terminal, width=160)) == []
        )
    assert junit_problems(render_junit(report)) == []
    assert prometheus_problems(render_prometheus(report), len(report.results)) == []
    triage = triage_text(text)
    assert raw_controls(triage) == [] and len(triage.split("\n")) == len(triage_text("x").split("\n"))


MD = MarkdownIt("commonmark", {"html": True}).enable("table")


@settings(FUZZ, max_examples=EXAMPLES * 20)
@given(HOSTILE)
def test_a_code_span_holds_exactly_its_text(text: str) -> None:
    (line,) = [t for t in MD.parse(f"- a {md_code(text)} b") if t.type == "inline"]
    spans = [t for t in line.children or () if t.type == "code_inline"]
    assert len(spans) == 1 and spans[0].content.strip(" ") == one_line(text).strip(" ")


@settings(FUZZ, max_examples=EXAMPLES * 20)
@given(HOSTILE)
def test_inline_text_is_one_paragraph_and_one_cell(text: str) -> None:
    blocks = [t.type for t in MD.parse(md_text(text)) if t.nesting >= 0 and t.type != "inline"]
    # a code block: data indented by 4 spaces, inert
    assert blocks in ([], ["paragraph_open"], ["code_block"])
    tokens = MD.parse(f"| a |\n|---|\n| {md_cell(text)} |\n")
    assert [t.type for t in tokens].count("tr_open") == 2 and [t.type for t in tokens].count("td_open") == 1
    children = [c for t in tokens + MD.parse(md_text(text)) if t.type == "inline" for c in t.children or ()]
    assert not [
        c.type for c in children if c.type in ("html_inline", "image", "link_open", "softbreak", "hardbreak")
    ]

"""What a reader sees is inert in every output: terminal and bidi controls and the invisible format characters are
shown as visible escapes in the HTML page, the Markdown and the console; in the Markdown, data's mentions, URLs,
e-mail addresses and issue references are code spans (GitHub and GitLab link none of them there), while the
catalog's references stay links."""

from __future__ import annotations

import functools
import re

import pytest
from markdown_it import MarkdownIt
from markupsafe import Markup

from ds_doctor.fleet.facts import Source, build_fleet
from ds_doctor.reports.html import render_fleet_html, render_html
from ds_doctor.reports.markdown import render_markdown
from ds_doctor.reports.model import Outcome, Report, Verdict
from ds_doctor.reports.safe import md_cell, md_html, md_text, md_url, visible
from tests.bounds import ratio
from tests.reports.fleet_samples import node
from tests.reports.hostile import console_output, hostile_report, markdown_problems, plant
from tests.reports.samples import a_report, case, issue
from tests.reports.test_hostile import write_everything

#: Controls and invisible characters a hostile run folder, case id or message holds: CSI, BEL, OSC, the bidi
#: override, marks and isolates, the Arabic letter mark, zero-width space, word joiner, byte order mark, soft
#: hyphen, tag characters (invisible ASCII) and a Hangul filler.
CONTROLS = (
    "\x1b[2J\x07 \x1b]0;title\x07 \u202eevil\u202c \u200fx\u200e \u061cy \u2066i\u2069 z\u200bz w\u2060j "
    "\ufeffb s\u00adh \U000e0041\U000e0042 \u3164."
)
#: No output carries one of these raw.
RAW = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b\u200e\u200f\u202a-\u202e\u2028\u2029\u2060-\u206f"
    "\u3164\ufeff\uffa0\ufff9-\ufffb\ufffe\uffff\U000e0000-\U000e007f]"
)
#: Pieces a tracker makes live: mentions (a decorator is one), URLs, an e-mail address, issue references.
TRACKER = {
    "mentions": "cc @org/team and @alice; @torch.no_grad",
    "urls": "see https://evil.example/a?b=1, www.evil.example/x or bob@evil.example",
    "references": "fixes #12, !34, GH-56 and org/repo#78",
}
#: What GitHub or GitLab links or notifies in rendered text (outside code).
LIVE = re.compile(
    r"(?<![\w`])@\w|\w://|(?<![\w.-])www\.\w|\w@\w[\w-]*\.\w|(?<![\w&#!])[#!]\d|(?<![\w-])GH-\d"
)
MD = MarkdownIt("commonmark", {"html": True}).enable("table")


def raw(text: str) -> list[str]:
    return sorted({repr(char) for char in RAW.findall(text)})


def live(markdown: str, *, html: bool = False) -> tuple[list[str], list[str]]:
    """What a tracker would make live in `markdown` (text outside code spans and blocks; with `html`, the report's
    own HTML outside `<code>` too), and the links it holds."""
    found, links = [], []
    for token in MD.parse(markdown):
        if token.type == "html_block" and html:
            found += LIVE.findall(re.sub(r"<code>.*?</code>", " ", token.content, flags=re.S))
        text, in_link = [], False
        for child in token.children or ():
            if child.type == "link_open":
                links.append(str(child.attrs["href"]))
            in_link = (in_link or child.type == "link_open") and child.type != "link_close"
            if child.type in ("text", "html_inline") and not in_link:
                text.append(child.content)
            elif child.type in ("code_inline", "softbreak", "hardbreak", "link_close"):
                text.append(" ")
        found += LIVE.findall("".join(text))
    return found, links


@functools.lru_cache(maxsize=8)
def planted(text: str) -> Report:
    return hostile_report(text)


def test_visible_shows_the_bidi_marks_and_the_invisible_format_characters() -> None:
    assert visible("\u200fa\u200eb\u061cc") == "\\u200fa\\u200eb\\u061cc"
    assert visible("z\u200bz\u2060\ufeff\u00ad\u3164") == "z\\u200bz\\u2060\\ufeff\\xad\\u3164"
    assert visible("\U000e0041\U000e007f") == "\\U000e0041\\U000e007f"  # tags: invisible ASCII
    # kept: the joiners of emoji sequences and Persian words, a variation selector, tabs and lines
    assert visible("\U0001f468\u200d\U0001f469 \u0645\u200c\u06cc \u2764\ufe0f\ta\nb") == (
        "\U0001f468\u200d\U0001f469 \u0645\u200c\u06cc \u2764\ufe0f\ta\nb"
    )


def test_the_html_page_shows_every_control_escaped() -> None:
    page = render_html(planted(CONTROLS))
    assert raw(page) == []
    assert "\\x1b[2J\\x07" in page and "\\u202eevil" in page and "\\U000e0041" in page


def test_the_fleet_page_shows_every_control_escaped() -> None:
    reports = [Report.from_dict(plant(r.to_dict(), CONTROLS)) for r in (node("node-a"), node("node-b"))]
    page = render_fleet_html(
        build_fleet([Source(f"/state/{i}.json", r) for i, r in enumerate(reports)], [], 10)
    )
    assert raw(page) == [] and "\\u202e" in page


def test_every_expression_of_a_template_passes_through_visible_markup_too() -> None:
    from ds_doctor.reports.html import _environment

    template = _environment().from_string("{{ text }}|{{ markup }}|{{ number }}|{{ nothing }}")
    shown = template.render(text="<\x1b>", markup=Markup("<b>\u202e</b>"), number=3, nothing=None)
    assert shown == "&lt;\\x1b&gt;|<b>\\u202e</b>|3|None"


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_the_console_shows_every_control_escaped(terminal: bool) -> None:
    out = console_output(write_everything(planted(CONTROLS), CONTROLS), terminal=terminal, width=400)
    assert raw(out) == []
    assert "\\u200fx\\u200e" in out  # a run folder, printed by `print_paths`


def test_the_markdown_shows_every_control_escaped() -> None:
    text = render_markdown(planted(CONTROLS))
    assert raw(text) == [] and markdown_problems(text) == []


@pytest.mark.parametrize("name", sorted(TRACKER))
def test_data_in_the_markdown_mentions_links_and_references_nothing(name: str) -> None:
    text = render_markdown(planted(TRACKER[name]))
    found, links = live(text)
    assert found == [] and links == []
    assert markdown_problems(text) == []
    code = {"mentions": "`@org/team`", "urls": "`https://evil.example/a?b=1,`", "references": "`org/repo#78`"}
    assert code[name] in text


@pytest.mark.parametrize("name", sorted(TRACKER))
def test_each_markdown_function_defuses_the_pieces(name: str) -> None:
    for shown in (md_text(TRACKER[name]), md_cell(TRACKER[name]), f"- {md_text(TRACKER[name])}"):
        assert live(shown) == ([], [])


def test_a_mention_inside_a_summary_is_defused() -> None:
    assert live(f"<details><summary>{md_html(TRACKER['mentions'])}</summary>", html=True) == ([], [])


def test_the_catalogs_references_stay_links_and_the_same_url_in_data_does_not() -> None:
    ref = "https://github.com/deepspeedai/DeepSpeed/issues/7226"
    report = a_report(
        [
            case(
                Outcome.XFAIL,
                "reproduced",
                reason=f"see {ref}",
                known_issue=issue("ds_x", Verdict.AFFECTED, remedy="upgrade (PR #8144)", refs=(ref,)),
            )
        ]
    )
    found, links = live(render_markdown(report))
    assert found == [] and set(links) == {ref}
    assert md_url(ref) == f"<{ref}>" and md_text(ref) == f"`{ref}`"
    assert md_url("javascript:alert(1)") == "javascript:alert(1)" and md_url(f"{ref} x") == f"`{ref}` x"


ORDINARY = ("[rank0] step 12 loss 2.345 grad_norm 1.2 lr 3e-4 tokens/s 12345\n" * 20_000)[: 10**6]
HOSTILE = {
    "at_dash": "@a-" * (10**6 // 3),
    "slashes": "a/" * (10**6 // 2),
    "refs": "a/b#" * (10**6 // 4),
    "letters_then_scheme": "ab+" * (10**6 // 3) + "://",
    "emails": "a@b." * (10**6 // 4),
    "local_part": "a." * (10**6 // 2) + "@",
    "digits_then_scheme": "#" + "1" * 10**6 + "://",
    "refs_then_scheme": " #1a" * (10**6 // 4) + "://",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_defusing_a_hostile_megabyte_takes_linear_time(name: str) -> None:
    took = ratio(lambda: md_text(HOSTILE[name]), lambda: md_text(ORDINARY), 10.0)
    assert took <= 10.0, f"{took:.1f}x the time of an ordinary megabyte"

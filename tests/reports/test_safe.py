"""The functions every renderer puts data through (reports/safe.py), on the inputs that motivate them; the
properties over random text are in test_fuzz.py."""

from __future__ import annotations

from ds_doctor.reports.safe import (
    LABEL_CHARS,
    clip,
    md_cell,
    md_code,
    md_fence,
    md_html,
    md_text,
    one_line,
    prom_label,
    prom_name,
    visible,
)


def test_control_characters_are_shown_escaped() -> None:
    assert (
        visible("a\x1b[2Jb\rc\x00\x9b\u202e\udc80\ufffe\td\r\ne")
        == "a\\x1b[2Jb\\rc\\0\\x9b\\u202e\\udc80\\ufffe\td\ne"
    )
    assert one_line("one\ntwo\r\nthree") == "one two three"
    assert clip("x" * 50, 10) == "x" * 9 + "…" and clip("short", 10) == "short"
    assert visible("emoji \U0001f525 and ümlauts") == "emoji \U0001f525 and ümlauts"


def test_markdown_text_cannot_start_a_block_or_be_html() -> None:
    assert md_text("# heading") == "\\# heading" and md_text("#2 of 3") == "`#2` of 3"
    assert md_text("1. item") == "1\\. item" and md_text("1.5") == "1.5" and md_text("- item") == "\\- item"
    assert md_text("-11.1% (tolerance 10%)") == "-11.1% (tolerance 10%)"
    assert md_text("token <redacted> & <script>") == "token &lt;redacted&gt; &amp; &lt;script&gt;"
    assert md_text("a\n# b") == "a # b" and md_text("a|b") == "a\\|b" and md_text("`a|b`") == "`a|b`"
    assert md_text("[x](javascript:y) ![i](http://t)") == "[x]\\(javascript:y) !\\[i]\\(`http://t)`"
    assert md_text("run `pip install ninja` first") == "run `pip install ninja` first"  # its own code span
    assert md_text("a ` b") == "a \\` b"  # a stray backtick opens nothing
    assert md_text("C:\\path\\") == "C:\\\\path\\\\"


def test_an_asterisk_in_text_stays_an_asterisk() -> None:
    """A remedy's glob (Ray's worker logs) read as emphasis lost both asterisks and italicised what lay between."""
    from markdown_it import MarkdownIt

    glob = "worker-*.err, python-core-worker-*.log"
    assert MarkdownIt().renderInline(md_text(glob)) == glob
    assert "<em>" in MarkdownIt().renderInline(glob)  # what it rendered as before


def test_a_code_span_and_a_code_block_outlast_the_backticks_inside() -> None:
    assert md_code("zero_offload[z3]") == "`zero_offload[z3]`"
    assert md_code("a ``` b") == "````a ``` b````" and md_code("`x") == "`` `x ``"
    assert md_fence("ok") == ["```", "ok", "```"]
    assert md_fence("x\n```\n# pwned") == ["~~~", "x", "```", "# pwned", "~~~"]
    assert md_fence("`````\n~~~")[0] == "~~~~"  # the shorter fence of the two


def test_cells_and_html() -> None:
    assert md_cell("a | b") == "a \\| b" and md_cell(md_code("a|b")) == "`a\\|b`"
    assert md_cell("# not a heading") == "# not a heading" and md_cell("`x|y`") == "`x\\|y`"
    assert md_html("main <module> (x.py:1)\n</summary>") == "main &lt;module&gt; (x.py:1) &lt;/summary&gt;"


def test_prometheus_names_and_labels() -> None:
    assert prom_name("ds_doctor_busbw_gbps") == "ds_doctor_busbw_gbps"
    assert prom_name("busbw-gb/s") == "busbw_gb_s" and prom_name("1x") == "_1x"
    assert prom_label('a"b\\c\x1b') == 'a"b\\c\\x1b'  # quotes and backslashes: prometheus_client's to escape
    long = prom_label("a" * 5000 + "END")
    assert len(long) == LABEL_CHARS and long.endswith("END") and "…" in long


def test_a_value_longer_than_a_line_shows_is_cut_with_an_ellipsis() -> None:
    from ds_doctor.reports.safe import INLINE_MAX

    text = md_text("see https://example.com " + "x" * (5 * INLINE_MAX))
    assert len(text) <= INLINE_MAX + 40 and text.endswith("…")
    assert "`https://example.com`" in text  # what it shows is defused all the same

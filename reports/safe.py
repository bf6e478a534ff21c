"""Text from a report is someone else's text: a rank's error message, a host name, a path, a plugin's case id.
The outputs go to public tickets, CI logs and terminals, so each output kind puts data through one function
here, wherever it puts data, and that function keeps the data from doing anything but being read:

- `visible` / `one_line`: control characters (C0 but newline and tab, DEL, C1), the bidi marks, overrides and
  isolates, the invisible format characters that hide or join text (`INVISIBLE`), line separators, XML's
  non-characters and lone surrogates (`surrogateescape`) are shown escaped (`\\x1b`, `\\r`, `\\u202e`,
  `\\udc80`, `\\U000e0041`), never sent raw; `one_line` also turns line breaks into spaces. Plain text (the
  console, `triage`), the HTML page (its Jinja `finalize`) and every other kind below start here.
- Markdown: `md_text` for inline text, `md_code` for a code span, `md_fence` for a code block, `md_cell` for a
  table cell, `md_html` inside the report's own HTML (`<summary>`), `md_url` for ds-doctor's own links (the
  catalog's references). `Md` marks text already made Markdown. In data, what a tracker turns into a link or a
  notification (a URL, `www.`, an e-mail address, an `@user` or `@org/team` mention, an issue reference such
  as `#12`, `!12`, `GH-12` or `org/repo#12`) is put in a code span, where neither GitHub nor GitLab links it
  (not in `md_html`: a `<summary>` holds HTML, where only a `<code>` element would do).
- `xml_text` for JUnit XML, `prom_label` and `prom_name` for Prometheus.

Only the standard library: every renderer imports this.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

#: Invisible format characters that make text read other than it is: the soft hyphen, the Arabic letter mark
#: and the left-to-right and right-to-left marks (bidi, like the overrides), the Mongolian vowel separator, the
#: zero-width space, the word joiner and invisible operators (U+2060-U+2064, and the deprecated U+206A-U+206F),
#: the byte order mark inside text, the interlinear annotation marks, the Hangul fillers that show as a blank
#: name, and the tag characters (U+E0000-U+E007F, invisible ASCII). The zero-width non-joiner and joiner
#: (U+200C, U+200D) and the variation selectors stay: Persian and Indic words and emoji sequences need them,
#: and they reorder nothing.
INVISIBLE = (
    "\u00ad\u061c\u180e\u200b\u200e\u200f\u2060-\u2064\u206a-\u206f\u3164\ufeff\uffa0"
    "\ufff9-\ufffb\U000e0000-\U000e007f"
)
#: Shown escaped wherever data goes: C0 (but \n and \t), DEL, C1, the bidi overrides (U+202A-U+202E) and
#: isolates (U+2066-U+2069), `INVISIBLE`, the line and paragraph separators, U+FFFE/U+FFFF (not XML) and lone
#: surrogates.
CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029\ufffe\uffff\ud800-\udfff"
    + INVISIBLE
    + "]"
)
_NAMED = {"\r": "\\r", "\x00": "\\0"}


def _shown(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(value: object) -> str:
    """`value` as text with every control character shown escaped; lines (`\\n`, `\\r\\n`) and tabs kept."""
    return CONTROL.sub(_shown, "" if value is None else str(value).replace("\r\n", "\n"))


def one_line(value: object) -> str:
    """`visible`, on one line: a line break becomes a space, so data never starts a line of its own."""
    return visible(value).replace("\n", " ")


def clip(value: object, width: int) -> str:
    """`one_line(value)`, at most `width` characters: cut with an ellipsis."""
    text = one_line(value)
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


# -- Markdown (CommonMark, and GitHub's tables) ------------------------------------------------------------------


class Md(str):
    """Text that is Markdown already (the report's own, or data put through the functions below)."""


_TICKS = re.compile(r"`+")
#: What starts a block when it starts a line (or a list item): a heading, a list item, a tilde fence, a link
#: reference definition, a thematic break or setext underline. A backslash goes before the marker (for an
#: ordered list, before its `.` or `)`); elsewhere on a line these are text anyway. (`>`, `<` and `|` are
#: escaped everywhere; a backtick fence cannot open from `md_text`: a run of backticks is a closed code span,
#: which a fence's info string may not hold, or escaped.)
_BLOCK_START = re.compile(
    r"""\s*(?:
      (?=\#{1,6}(?:\s|$))
    | (?=[-+*](?:\s|$))
    | \d{1,9}(?=[.)](?:\s|$))
    | (?=~~~)
    | (?=\[[^\]]*\]:)
    | (?=([-*_=])\s*(?:\1\s*)*$)
)""",
    re.X,
)


def _block_start_escaped(text: str) -> str:
    match = _BLOCK_START.match(text)
    return text if match is None else f"{text[: match.end()]}\\{text[match.end() :]}"


def _plain(text: str) -> str:
    """Inline text that is not code: HTML made text; backslashes, stray backticks, pipes and asterisks literal (a
    remedy's `worker-*.err, python-core-worker-*.log` is a glob, not emphasis); no link or image (`[text](url)`
    shows as written)."""
    text = html.escape(text.replace("\\", "\\\\"), quote=False)
    text = text.replace("`", "\\`").replace("|", "\\|").replace("*", "\\*")
    return text.replace("![", "!\\[").replace("](", "]\\(")


#: What GitHub or GitLab makes live in text, and neither does in a code span (GitHub's mention and reference
#: filters skip `code` and `pre`; GitLab's reference extractor strips code first; neither honours `\\@` or
#: `\\#`): a URL of any scheme and a `www.` address (autolinked to their first space), an e-mail address, an
#: `@user` or `@org/team` mention (a decorator `@torch.no_grad` too), and a reference to an issue or merge
#: request (`#12`, `!12`, `GH-12`, `org/repo#12`; one glued to a URL leaves it to the URL's span). Each
#: alternative is entered at the start of its run only (the look-behind after the first character): linear time
#: on a long line.
_LIVE = re.compile(
    r"""[\w+.-](?<![\w+.-].)[\w+.-]*://\S*
    | w(?<![\w.-]w)ww\.\S+
    | [\w+-](?<![\w.+-].)[\w.+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+
    | @(?<![\w`]@)[\w.-]*\w(?:/[\w.-]*\w)?
    | [\w.-](?<![\w.-].)[\w.-]*/[\w.-]+[#!]\d+(?!\d)(?![\w+.-]*://)
    | [#!](?<![\w&#!][#!])\d+(?!\d)(?![\w+.-]*://)
    | G(?<![\w-]G)H-\d+""",
    re.X,
)


def _live_apart(text: str, plain: Callable[[str], str], live: Callable[[str], str]) -> str:
    """`text` with each live piece (`_LIVE`: a URL, a mention, an issue reference) written by `live`, and the text
    between them by `plain`."""
    out, pos = [], 0
    for found in _LIVE.finditer(text):
        out += [plain(text[pos : found.start()]), live(found.group())]
        pos = found.end()
    return "".join([*out, plain(text[pos:])])


def _defused(text: str, cell: bool) -> str:
    """Inline text that is not code (`_plain`), with each live piece (`_LIVE`) shown as a code span instead. The
    text holds no backtick (`_inline` took them out), so one backtick delimits each span."""

    def code(span: str) -> str:
        return "`" + (span.replace("|", "\\|") if cell else span) + "`"  # in a table, a pipe ends a cell

    return _live_apart(text, _plain, code)


#: the most characters of one value a Markdown line shows (a ticket is cut at 60,000 in all): a report of 300
#: values of 100,000 characters each took 2 s to render, each searched whole for live pieces and then cut away
INLINE_MAX = 20_000


def _inline(value: object, *, cell: bool = False) -> str:
    """Data as Markdown inline content on one line: no HTML, no code span left open, no table cell ended (in a
    `cell`), no link, mention or reference a tracker would make live (`_LIVE`); its own balanced code spans stay
    code spans (a remedy's `pip install ninja`). At most INLINE_MAX characters of the value, then an ellipsis."""
    text = clip(value, INLINE_MAX + 1)
    out, pos = [], 0
    while pos < len(text):
        run = _TICKS.search(text, pos)
        if run is None:
            out.append(_defused(text[pos:], cell))
            break
        out.append(_defused(text[pos : run.start()], cell))
        close = re.compile(rf"(?<!`){run.group()}(?!`)").search(text, run.end())
        if close is None:
            out.append("\\`" * len(run.group()))
            pos = run.end()
        else:
            span = text[run.start() : close.end()]
            # in a table, a pipe even in code ends a cell
            out.append(span.replace("|", "\\|") if cell else span)
            pos = close.end()
    return "".join(out)


def md_text(value: object) -> Md:
    """Data as inline Markdown on one line, wherever it stands (the start of a line too): no HTML, no block it
    could start, no code span left open."""
    return Md(_block_start_escaped(_inline(value)))


def md_code(value: object) -> Md:
    """Data as a code span on one line: delimited by more backticks than any run inside it."""
    text = one_line(value)
    longest = max((len(run) for run in _TICKS.findall(text)), default=0)
    if not text.strip(" ") or text.startswith("`") or text.endswith("`") or (text[0] == text[-1] == " "):
        text = f" {text} "
    return Md(f"{'`' * (longest + 1)}{text}{'`' * (longest + 1)}")


def md_fence(value: object) -> list[str]:
    """Data as a fenced code block, its lines kept: the fence is longer than any run of its character inside,
    so nothing in it closes the block (backticks, or tildes where that needs the shorter fence)."""
    text = visible(value)
    longest = {char: max((len(run) for run in re.findall(f"{char}+", text)), default=0) for char in "`~"}
    char = min("`~", key=lambda c: (longest[c], c != "`"))
    fence = char * max(3, longest[char] + 1)
    return [fence, *text.split("\n"), fence]


def md_cell(value: object) -> str:
    """A table cell: `Md` as it is, any other value inline text (a cell holds no block: nothing to escape at its
    start); a `|` never ends the cell (escaped even inside a code span, as GitHub's tables read it)."""
    return value.replace("|", "\\|") if isinstance(value, Md) else _inline(value, cell=True)


def md_html(value: object) -> Md:
    """Data inside the report's own HTML (`<summary>`), where Markdown is not read: text, on one line, each live
    piece (`_LIVE`: a URL, a mention, an issue reference) inside `<code>`, where trackers make nothing live."""

    def escaped(text: str) -> str:
        return html.escape(text, quote=False)

    return Md(_live_apart(one_line(value), escaped, lambda span: f"<code>{escaped(span)}</code>"))


#: A link of ds-doctor's own (a known issue's reference from the catalog): https, and no character that would
#: end an autolink or start HTML.
_OWN_URL = re.compile(r"https://[A-Za-z0-9.-]+(?:[/?#][^\s<>`\\\x00-\x1f\x7f-\x9f]*)?")


def md_url(value: object) -> Md:
    """A link ds-doctor writes itself (the catalog's upstream issue), kept a link as `<https://...>`; anything else
    is data (`md_text`)."""
    text = "" if value is None else str(value)
    return Md(f"<{text}>") if _OWN_URL.fullmatch(text) and not CONTROL.search(text) else md_text(text)


# -- JUnit XML, Prometheus -------------------------------------------------------------------------------------


def xml_text(value: object) -> str:
    """Text for an XML 1.0 attribute or element: what XML forbids (most of C0, U+FFFE/U+FFFF, lone surrogates)
    and what a CI page would interpret (C1, bidi) shown escaped. ElementTree escapes `<`, `&`, quotes and `]]>`."""
    return visible(value)


LABEL_CHARS = 1_000  # a label value, at most (a scrape's label_value_length_limit fails the whole scrape)


def prom_label(value: object) -> str:
    """A label value: shown escaped like `visible`, at most `LABEL_CHARS` (its middle cut: ids differ at their
    ends); prometheus_client escapes `\\`, `"` and newlines itself."""
    text = visible(value)
    half = LABEL_CHARS // 2
    return text if len(text) <= LABEL_CHARS else f"{text[:half]}…{text[-(LABEL_CHARS - half - 1) :]}"


def prom_name(name: str) -> str:
    """A metric or label name as the text format 0.0.4 allows: `[a-zA-Z_][a-zA-Z0-9_]*`."""
    name = re.sub(r"[^a-zA-Z0-9_]", "_", name)
    return name if re.match(r"[a-zA-Z_]", name) else f"_{name}"

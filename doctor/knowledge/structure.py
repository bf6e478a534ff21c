"""Matching by structure, not only by sentence: what a ticket shows of a known error when its exact line is not there.

On a fresh sample of real tickets, triage named 10 of 19 texts whose cause the catalog has; the misses were the right
message in another shape. Each shape is a kind of match here, and each says which it was (`Kind`), in every format:

- **loose**: the entry's patterns with letter case and quotes aside (`'`, `"`, backticks, curly quotes), over the
  text flattened where a terminal wrapped it: "Cannot Copy Out Of Meta Tensor" in a title, `'model'` pasted as
  `model`.
- **cut**: a title or an excerpt that stops inside the message ("Expected all tensors to be on the same device,
  but...", "... found at least two devices, cu"). Each wording of an entry has a distinctive leading part: the
  shortest run of its first words, at least `LEAD_MIN` characters, that no other entry's wording contains (measured
  over the catalog when it is loaded). A text whose line runs along a wording past that part, and stops there (the
  line ends, or an ellipsis) matches it. Shorter than `CERTAIN_CUT` characters and three quarters of the wording, the
  match is "possibly". A title retyped from inside the message, or an excerpt whose head was cut away ("error:
  initialize your accelerator via accelerator = Accelerator()"), matches a run of a wording that starts after its
  first word, at least `LEAD_MIN` characters found in no other entry's wording, the text stopping where the run does
  (`clipped_hits`): "possibly" under `CERTAIN_CUT` characters, whatever share of the wording it is.
- **frame**: a Python traceback whose raising frame is the function that raises the entry's message (file and
  function, from the sources of the releases read: `data/frames.toml`, `python -m ds_doctor.knowledge.frames`) with
  the same exception type, in other words: a sibling sentence of the same check, or the same check reworded by a
  release nobody read, or an excerpt that stops at the frame's `raise`. Only a function that raises that type once
  counts (`MOST_RAISES`), and it is always "possibly".
- **banner**: a warning the library prints before the error (an entry's `banners`), pasted without the error's own
  line: "possibly" the entry.
- **paraphrase**: the failure named in prose (an entry's `paraphrases`: "CUDA OOM", "loss nan"), not its message:
  "possibly" the entry.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
import sys
from collections.abc import Iterable, Sequence

from ds_doctor.knowledge.issues import KnownIssue

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib


class Kind(str, enum.Enum):
    """How a text matched an entry."""

    WORDING = "wording"  # a pattern as written
    LOOSE = "loose"  # a pattern, case and quotes aside
    CUT = "cut"  # the distinctive leading part of a wording, the text cut after it
    FRAME = "frame"  # the raising frame and exception type of the entry's check, in other words
    BANNER = "banner"  # a warning printed before the error, without the error
    PARAPHRASE = "paraphrase"  # the failure named in prose ("CUDA OOM", "loss is nan"), not its message


QUOTES = "'\"`\u2018\u2019\u201c\u201d"
_QUOTE_RUN = re.compile(f"[{QUOTES}]")
_QUANTIFIER = re.compile(r"(?:[?*+]|\{\d*(?:,\d*)?\})[?+]?")


def unquoted(text: str) -> str:
    return _QUOTE_RUN.sub("", text)


def _skip_quantifier(pattern: str, at: int) -> int:
    found = _QUANTIFIER.match(pattern, at)
    return found.end() if found else at


def _class_end(pattern: str, start: int) -> int | None:
    """Where the character class opened at `start` closes."""
    i = start + 1
    i += 1 if pattern[i : i + 1] == "^" else 0
    i += 1 if pattern[i : i + 1] == "]" else 0
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] == "]":
            return i
        i += 1
    return None


def _loose_class(pattern: str, start: int, end: int) -> str:
    body = pattern[start + 1 : end]
    if body.startswith("^"):
        return pattern[start : end + 1]  # a negated class: the text has no quotes for it to refuse
    kept = re.sub(rf"\\?[{QUOTES}]", "", body)
    return f"[{kept}]" if kept else ""


def loosened_pattern(pattern: str) -> str:
    """A pattern for text in `loose_form` (quotes gone, lower case): its quote characters go (with a quantifier of
    theirs) and its letters are lowered (not an escape's: `\\S` stays). Lowering both sides keeps re's fast search
    for a literal head, which `(?i)` loses: over an 8 MB log the loose pass took 17 s with `(?i)`. A pattern this
    reading cannot follow is made case-blind instead."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and pattern[i + 1 : i + 2] in tuple(QUOTES):
            i = _skip_quantifier(pattern, i + 2)
        elif char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
        elif char == "[":
            end = _class_end(pattern, i)
            if end is None:
                return _case_blind(pattern)
            kept = _loose_class(pattern, i, end)
            out.append(kept)
            i = end + 1 if kept else _skip_quantifier(pattern, end + 1)
        elif char in QUOTES:
            i = _skip_quantifier(pattern, i + 1)
        else:
            out.append(char)
            i += 1
    loose = _lowered("".join(out))
    if loose is None:
        return _case_blind(pattern)
    try:
        re.compile(loose)
    except re.error:
        return _case_blind(pattern)
    return loose


def _lowered(pattern: str) -> str | None:
    """The pattern with its letters lowered, escapes and group names kept; None where it has a named character."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] == "\\":
            if pattern[i + 1 : i + 2] == "N":
                return None
            out.append(pattern[i : i + 2])
            i += 2
        elif pattern.startswith(("(?P<", "(?P="), i):
            end = pattern.find(">" if pattern[i + 3] == "<" else ")", i)
            if end < 0:
                return None
            out.append(pattern[i : end + 1])
            i = end + 1
        else:
            out.append(pattern[i].lower())
            i += 1
    return "".join(out)


def loose_form(text: str) -> str:
    """Text as loosened patterns read it: quotes gone, lower case."""
    return unquoted(text).lower()


def _case_blind(pattern: str) -> str:
    flags = re.match(r"\(\?([aiLmsux]+)\)", pattern)
    return f"(?i{flags.group(1)}){pattern[flags.end() :]}" if flags else f"(?i){pattern}"


@functools.lru_cache(maxsize=1024)
def loose_issue(issue: KnownIssue) -> KnownIssue:
    """The entry with every regex loosened (`loosened_pattern`): what the loose and paraphrase passes match, loosened
    once per entry."""
    return dataclasses.replace(
        issue,
        patterns=tuple(loosened_pattern(p) for p in issue.patterns),
        requires=tuple(loosened_pattern(p) for p in issue.requires),
        evidence=tuple(loosened_pattern(p) for p in issue.evidence),
        paraphrases=tuple(loosened_pattern(p) for p in issue.paraphrases),
    )


# --- cut: a wording's distinctive leading part, the text stopping after it ---

LEAD_MIN = 24  # characters a leading part has at least (fewer are words many messages begin with)
CERTAIN_CUT = 60  # a cut match this long (or three quarters of its wording) is certain; shorter, "possibly"
_SPACES = re.compile(r"[ \t]+")
_ELLIPSIS = ("...", "\u2026", "[...]", "(...)")


def cut_form(text: str) -> str:
    """Text as the cut pass compares it: lower case, quotes gone, runs of blanks one space, lines kept (a line's
    end is where a title or an excerpt stops), each line's own indentation gone."""
    lines = (_SPACES.sub(" ", line).strip() for line in loose_form(text).split("\n"))
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Lead:
    """A wording of an entry, in `cut_form` on one line, and how many of its first characters no other entry's
    wording contains."""

    issue: str
    wording: str
    distinct: int


#: an operating system's error as Python words it ("FileNotFoundError: [Errno 2] No such file or directory:"): every
#: failing open or write begins so, so a leading part holds at least a word past it (the path, in a library's wording)
_OS_ERROR = re.compile(r"(?:[\w.]+: )?\[errno \d+\] [^:\n]*:? ?")


def leads(issues: Sequence[KnownIssue]) -> tuple[Lead, ...]:
    """Each wording's distinctive leading part: its shortest run of whole first words, `LEAD_MIN` characters or
    more and past an operating system's error text, found in no other entry's wording (none where the whole wording
    is in another's; an entry narrowed by `requires` that shares the very wording leaves it to the entry that is
    not)."""
    forms = [(issue.id, " ".join(cut_form(w.text).split())) for issue in issues for w in issue.wordings]
    # a wording a narrowed entry shares with the generic one (the allocator's OOM message, told apart by the phase
    # its frames show) is the generic entry's to lead with
    narrowed = {issue.id for issue in issues if issue.requires}
    found = []
    for owner, wording in forms:
        own = {form for other, form in forms if other == owner}
        others = [form for other, form in forms if other != owner and not (other in narrowed and form in own)]
        floor = found_os.end() if (found_os := _OS_ERROR.match(wording)) else 0
        ends = [m.start() for m in re.finditer(" ", wording) if m.start() >= max(LEAD_MIN, floor + 1)]
        ends += [len(wording)]
        for end in ends:
            if len(wording) >= LEAD_MIN and not any(wording[:end] in other for other in others):
                found.append(Lead(owner, wording, end))
                break
    return tuple(found)


def _next_line(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \n":
        at += 1
    return at


def _run_along(text: str, at: int, wording: str) -> tuple[int, bool]:
    """How far `text` from `at` runs along `wording` (across line breaks that fall between or inside its words), and
    whether it stops there as a cut (the text's end, its line's end, an ellipsis) rather than by saying something
    else."""
    ti, wi = at, 0
    while wi < len(wording):
        if ti >= len(text):
            return wi, True
        char, want = text[ti], wording[wi]
        if char == want:
            ti, wi = ti + 1, wi + 1
            continue
        if text.startswith(_ELLIPSIS, ti) or (char == " " and text.startswith(_ELLIPSIS, ti + 1)):
            return wi, True
        if char != "\n":
            return wi, False
        after = _next_line(text, ti)
        if want == " " and text[after : after + 1] == wording[wi + 1 : wi + 2]:
            ti, wi = after, wi + 1  # a line broken between two words
        elif text[after : after + 1] == want:
            ti = after  # broken inside a word
        else:
            return wi, True
    return wi, True


#: past this many characters, the passes beyond the patterns as written (loose, cut, paraphrase) read the text's head
#: and its tail only (a ticket's title, its excerpt's end, a log's last lines): an 8 MB log costs them what 1.25 MB does
CUT_READ = 1 << 20


def bounded(text: str) -> str:
    """What the loose, cut and paraphrase passes read of a long text: its first quarter MiB and its last MiB."""
    return text if len(text) <= CUT_READ else text[: CUT_READ // 4] + "\n" + text[-CUT_READ:]


@dataclasses.dataclass(frozen=True)
class CutHit:
    issue: str
    matched: str  # the wording's part the text runs along
    wording: str
    position: int  # in the cut form
    clipped: bool = False  # a run from inside the wording (the text's line starts within the message)

    @property
    def certain(self) -> bool:
        if self.clipped:  # however much of the wording it holds, its head is not there
            return len(self.matched) >= CERTAIN_CUT
        return len(self.matched) >= CERTAIN_CUT or len(self.matched) >= 0.75 * len(self.wording)


def cut_hits(text: str, found: Iterable[Lead]) -> dict[str, CutHit]:
    """For each entry, its longest cut match in `text`."""
    form = cut_form(bounded(text))
    best: dict[str, CutHit] = {}
    for lead in found:
        head = lead.wording[: lead.distinct]
        start, tries = form.find(head), 0
        while start >= 0 and tries < 8:
            length, cut = _run_along(form, start, lead.wording)
            hit = CutHit(lead.issue, lead.wording[:length], lead.wording, start)
            if cut and (lead.issue not in best or len(hit.matched) > len(best[lead.issue].matched)):
                best[lead.issue] = hit
            start, tries = form.find(head, start + 1), tries + 1
    return best


def located(text: str, matched: str) -> tuple[int, str] | None:
    """Where a cut match's words stand in the text as written (any case, quotes, blanks and line breaks between
    them), and the text there."""
    words = matched.split()
    if not words:
        return None
    gap = f"[\\s{QUOTES}]*"
    pattern = gap.join(gap.join(re.escape(char) for char in word) for word in words[:40])
    found = re.compile(pattern, re.IGNORECASE).search(bounded(text))
    return (found.start(), found.group(0)) if found else None


# --- clipped: a distinctive run from inside a wording, the text's line starting within the message ---

#: the words a run from inside a wording is looked up by (the text's words at each place, at once)
CLIP_WORDS = 4


@dataclasses.dataclass(frozen=True)
class Inner:
    """Each wording's runs that start after its first word, by their first `CLIP_WORDS` words (in `cut_form`), and
    every entry's wordings, to tell a run that only one entry's wording holds."""

    runs: dict[
        tuple[str, ...], tuple[tuple[str, str, int], ...]
    ]  # words -> (issue, wording, where the run starts)
    forms: tuple[tuple[str, str], ...]  # (issue, wording) of every entry
    heads: frozenset[str]  # the words a run begins with: only there does a text's word start a lookup


def inner_runs(issues: Sequence[KnownIssue]) -> Inner:
    forms = tuple((issue.id, " ".join(cut_form(w.text).split())) for issue in issues for w in issue.wordings)
    runs: dict[tuple[str, ...], list[tuple[str, str, int]]] = {}
    sentences = [_first_sentence(w.text) for issue in issues for w in issue.wordings]
    for (owner, wording), first in zip(forms, sentences, strict=True):
        # a run starts inside the first sentence: what follows is often advice many messages share (torch's "CUDA
        # kernel errors might be asynchronously reported ... Compile with TORCH_USE_CUDA_DSA ...")
        starts = [m.start() + 1 for m in re.finditer(" ", wording) if m.start() + 1 < first]
        for start in starts:
            words = tuple(wording[start:].split(" ", CLIP_WORDS)[:CLIP_WORDS])
            if len(words) == CLIP_WORDS:
                runs.setdefault(words, []).append((owner, wording, start))
    return Inner({words: tuple(found) for words, found in runs.items()}, forms, frozenset(k[0] for k in runs))


_WORD = re.compile(r"\S+")


#: a line's own message, printed whole: its type before it ("UserWarning: `do_sample` is set to `False`. However..."
#: shares a ValueError's inner sentence, not its message)
_TYPED = re.compile(r"\w(?:error|exception|warning|exit|interrupt)\)?:$")


def _clipped_at(form: str, at: int) -> bool:
    """Whether a run at `at` starts its line as a message clipped at its head: nothing before it on the line, an
    ellipsis, or a short label that is not an exception's type ("error:", "[rank0]:", "worker-0:"); after other words
    it is the tail of another sentence ("... activate padding with 'padding=True' to have batched tensors ...")."""
    prefix = form[form.rfind("\n", 0, at) + 1 : at].strip()
    if not prefix or prefix.endswith(_ELLIPSIS):
        return True
    return (
        prefix.endswith(":") and len(prefix) <= 40 and len(prefix.split()) <= 3 and not _TYPED.search(prefix)
    )


def _first_sentence(text: str) -> int:
    """Where a wording's first sentence ends in its one-line `cut_form`: its first line's end or its first ". "."""
    form = cut_form(text).strip()
    ends = [i for i in (form.find("\n"), form.find(". ")) if i >= 0]
    return len(" ".join(form[: min(ends)].split())) if ends else len(" ".join(form.split()))


def clipped_hits(text: str, inner: Inner) -> dict[str, CutHit]:
    """For each entry, its longest run from inside one of its wordings that the text holds, at least `LEAD_MIN`
    characters that no other entry's wording contains, the text stopping where the run does (its line's end, an
    ellipsis, the wording's own end): a message whose head was cut away or retyped ("error: initialize your
    accelerator via accelerator = Accelerator()"). Linear in the text: each word starts a lookup only where a run
    begins with it."""
    form = cut_form(bounded(text))
    words = [(m.start(), m.group(0)) for m in _WORD.finditer(form)]
    best: dict[str, CutHit] = {}
    for j in range(len(words) - CLIP_WORDS + 1):
        if words[j][1] not in inner.heads or not _clipped_at(form, words[j][0]):
            continue
        key = tuple(word for _, word in words[j : j + CLIP_WORDS])
        for issue, wording, start in inner.runs.get(key, ()):
            length, cut = _run_along(form, words[j][0], wording[start:])
            end = start + length
            if end < len(wording) and wording[end] != " ":  # a word cut: only its whole words count
                end = max(wording.rfind(" ", start, end), start)
            matched = wording[start:end].rstrip()
            if (
                not cut
                or len(matched) < LEAD_MIN
                or (issue in best and len(best[issue].matched) >= len(matched))
            ):
                continue
            if any(matched in other for owner, other in inner.forms if owner != issue):
                continue
            best[issue] = CutHit(issue, matched, wording, words[j][0], clipped=True)
    return best


# --- frame: the raising frame of the entry's check, in other words ---

_TYPE = r"(?:[A-Za-z_]\w{0,100}\.){0,8}[A-Za-z_]\w{0,100}(?:Error|Exception|Exit|Interrupt)"
_RAISING = re.compile(
    r'File "(?P<path>[^"\n]{1,500})", line \d{1,7}, in (?P<function>[\w<>.]{1,200})[ \t]*\n'
    r'(?:(?![ \t]*File ")[^\n]{0,500}\n){0,6}?'
    # the exception's own line, or (an excerpt that stops there) the frame's `raise Type(` line
    rf"(?:[ \t]*(?P<type>{_TYPE})(?::|[ \t]*$)|[ \t]*raise[ \t]+(?P<raise>{_TYPE})\()",
    re.MULTILINE,
)
#: a frame's line a terminal broke (`..., line 11` / `9, in _call_store`) is put back together before reading
_FRAME_START = re.compile(r'[ \t]*File "')
_FRAME_WHOLE = re.compile(r", line \d{1,7}, in [\w<>.]{1,200}[ \t]*$")


def _rejoined(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FRAME_START.match(line) and not _FRAME_WHOLE.search(line) and i + 1 < len(lines):
            joined = line.rstrip() + lines[i + 1].rstrip()
            if _FRAME_WHOLE.search(joined):
                out.append(joined)
                i += 2
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


@dataclasses.dataclass(frozen=True)
class Frame:
    """Where a release raises an entry's message: the file in its distribution, the function, the exception type,
    and how many times that function raises that type (one check among few, or one of many)."""

    issue: str
    file: str
    function: str
    exception: str
    raises: int
    read: str  # the release whose source said so


#: a function raising the type in more places than this raises it for more than one reason: which is not said
MOST_RAISES = 1


def load_frames(text: str) -> tuple[Frame, ...]:
    data = tomllib.loads(text)
    return tuple(Frame(**row) for row in data.get("frame", []))


@dataclasses.dataclass(frozen=True)
class Raised:
    """A raising frame a traceback shows: its file, function and exception type, and where it stands."""

    path: str
    function: str
    exception: str
    position: int

    def is_of(self, frame: Frame) -> bool:
        path = self.path.replace("\\", "/")
        return (
            self.function == frame.function
            and self.exception.rsplit(".", 1)[-1] == frame.exception
            and path.endswith("/" + frame.file)
            and frame.raises <= MOST_RAISES
        )


def raised(text: str) -> list[Raised]:
    """Each raising frame a traceback shows, with the type it raised (from the exception's line, or from the
    frame's own `raise` where an excerpt stops before the exception's line)."""
    joined = _rejoined(text) if 'File "' in text else text
    found = []
    for m in _RAISING.finditer(joined):
        kind = m["type"] or m["raise"]
        found.append(Raised(m["path"], m["function"], kind, m.start("type" if m["type"] else "raise")))
    return found

"""The one matcher: whether, and how strongly, a text matches a known issue. A run's error (`ds_doctor.run.merge`),
`ds-doctor triage` and the watch all classify through it, so one text gets one answer everywhere: the issues whose
signature matches, most specific first, each with the strength of its match (`strength`: "possibly" where a generic
message has none of the entry's evidence).

Text matched here may be a stranger's (a pasted log), so the search is linear in the text: a catalog pattern of the
form `head.*tail` (DOTALL) is searched as re.search would, but tried at the first place its head matches only:
re.search retries it at every later place the head matches, each try running to the end of the text, which a log
repeating the head makes quadratic (a 200 KB log of "server socket has failed to bind to " took 7 s in one pattern).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from ds_doctor.knowledge import catalog
from ds_doctor.knowledge.issues import REGEX_FLAGS, KnownIssue
from ds_doctor.knowledge.structure import (
    Frame,
    Inner,
    Kind,
    Lead,
    bounded,
    clipped_hits,
    cut_form,
    cut_hits,
    inner_runs,
    leads,
    located,
    loose_form,
    loose_issue,
    raised,
)
from ds_doctor.redact import scrub_text
from ds_doctor.reports.model import ErrorInfo, IssueRef, Verdict

SPAN_CHARS = 200
_T = TypeVar("_T")
_FLAGS = REGEX_FLAGS
_LEADING_FLAGS = re.compile(r"\(\?[aiLmsux]+\)")


def _top_level(pattern: str) -> tuple[list[int], int | None] | None:
    """Where a pattern has `|` outside groups and classes, and its first `.*` there; None for one this reading does
    not follow (a back reference, a scoped flag)."""
    if re.search(r"\\[1-9]|\(\?P=|\(\?[aiLmsux]*-", pattern):
        return None
    bars: list[int] = []
    dots: int | None = None
    depth, i, in_class = 0, 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            i += 2 if pattern[i + 1 : i + 2] == "^" else 1
            i += 1 if pattern[i : i + 1] == "]" else 0  # a "]" first in a class is literal
            continue
        elif char in "()":
            depth += 1 if char == "(" else -1
        elif depth == 0 and char == "|":
            bars.append(i)
        elif depth == 0 and char == "." and pattern[i + 1 : i + 2] == "*" and pattern[i + 2 : i + 3] != "+":
            dots = i if dots is None else dots
        i += 1
    return bars, dots


@dataclasses.dataclass(frozen=True)
class _Branch:
    whole: re.Pattern[str]
    head: re.Pattern[str] | None = None  # `head.*tail`: tried where the head first matches only
    head_width: int = 0  # the most characters the head spans (an overlapping later head is tried too)
    windowed: bool = False  # a `.*` elsewhere (in a lookahead, say): searched in windows of the text
    words: frozenset[str] = (
        frozenset()
    )  # words every match holds whole (`_words`): a text lacking one is not searched


def _parser() -> Any:
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - python 3.10
        import sre_parse
    return sre_parse


_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
#: the characters outside ASCII that re's IGNORECASE matches with an ASCII word character (measured over every code
#: point on Python 3.11): a text's words are read after these are made ASCII, so a `(?i)` pattern's word is found
_FOLDS = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
_TOKEN = re.compile(r"[a-z0-9_]+")


def _words(pattern: str) -> frozenset[str]:
    """The words (maximal runs of ASCII letters, digits and `_`, lower-cased) that every match of `pattern` holds
    whole, read from the pattern's parse: a run counts where what stands on each side is sure not to be a word
    character (a literal space or punctuation, `\\s`, `\\b`, `^`, `$`); any other neighbour (a class of letters, `.`,
    a repeat that may be empty, a look-around, a character outside ASCII) leaves that run out. Empty for a pattern this
    reading cannot follow: it is always searched."""
    sre = _parser()
    try:
        return frozenset(_sequence_words(sre, sre.parse(pattern, _FLAGS)))
    except Exception:  # a pattern re compiles but this reading trips on: searched as it is
        return frozenset()


def _flat(sre: Any, items: Iterable[tuple[Any, Any]]) -> Iterable[tuple[Any, Any]]:
    """`items` with each group read in place (its flags only change case, which `_words` ignores)."""
    for op, av in items:
        if op is sre.SUBPATTERN:
            yield from _flat(sre, av[-1])
        else:
            yield op, av


def _separator(sre: Any, op: Any, av: Any) -> bool:
    """Whether the item matches only characters that are not word characters, whatever the case."""
    if op is sre.LITERAL:
        return chr(av).isascii() and chr(av) not in _WORD_CHARS
    if op is sre.IN:
        return all(
            (o is sre.LITERAL and _separator(sre, o, a)) or (o is sre.CATEGORY and a is sre.CATEGORY_SPACE)
            for o, a in av
        )
    return False


def _sequence_words(sre: Any, items: Iterable[tuple[Any, Any]]) -> set[str]:
    found: set[str] = set()
    run: list[str] = []
    # whether a sure edge (a non-word character, `^`, `\b`) stands before the run: not before the first
    bounded = False

    def edge(sure: bool) -> None:
        nonlocal bounded
        if run and bounded and sure:
            found.add("".join(run))
        run.clear()
        bounded = sure

    edges = (sre.AT_BOUNDARY, sre.AT_BEGINNING, sre.AT_BEGINNING_STRING, sre.AT_END, sre.AT_END_STRING)
    for op, av in _flat(sre, items):
        if op is sre.LITERAL and chr(av) in _WORD_CHARS:
            run.append(chr(av).lower())
        elif op is sre.AT and av in edges:
            edge(True)
        elif op is sre.LITERAL or op is sre.IN:
            edge(_separator(sre, op, av))
        elif op is sre.MAX_REPEAT or op is sre.MIN_REPEAT:
            separates, inside = _repeat_words(sre, av)
            edge(separates)
            found |= inside
        elif op is sre.BRANCH:
            edge(False)
            alternatives = [_sequence_words(sre, branch) for branch in av[1]]
            found |= set.intersection(*alternatives) if alternatives else set()
        else:  # `.`, a category, a look-around, a back reference: what stands there is not sure
            edge(False)
    edge(False)  # a run at the end may go on in the text
    return found


def _repeat_words(sre: Any, av: Any) -> tuple[bool, set[str]]:
    """Whether a repeat is a sure edge (`\\s+`, ` +`), and the words sure inside it (none where it may be empty)."""
    low, _high, sub = av
    below = list(_flat(sre, sub))
    if low >= 1 and len(below) == 1 and _separator(sre, *below[0]):
        return True, set()
    return False, _sequence_words(sre, below) if low >= 1 else set()


@functools.lru_cache(maxsize=16)
def _text_words(text: str) -> frozenset[str]:
    """A text's words as `_words` reads a pattern's (the same few texts are searched by every pattern in turn)."""
    return frozenset(_TOKEN.findall(text.translate(_FOLDS).lower()))


# a branch with a `.*` the head/tail reading does not cover is searched in windows this long...
WINDOW = 16 * 1024
REACH = 4 * 1024  # ...overlapping by this much: its matches up to REACH long are found
_UNBOUNDED_DOT = re.compile(r"(?<!\\)\.(?:[*+]|\{\d*,\})")


def _max_width(pattern: str) -> int | None:
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - python 3.10
        import sre_parse
    width = sre_parse.parse(pattern, _FLAGS).getwidth()[1]
    return None if width >= sre_parse.MAXREPEAT else int(width)


def _branch(prefix: str, branch: str) -> _Branch:
    whole = re.compile(prefix + branch, _FLAGS)
    dots = (_top_level(branch) or ([], None))[1]
    head, tail = (branch[:dots], branch[dots + 2 :]) if dots is not None else ("", branch)
    width = _max_width(prefix + head) if dots is not None else None
    words = _words(prefix + branch)
    if width is None or _UNBOUNDED_DOT.search(head) or _UNBOUNDED_DOT.search(tail.removeprefix("?")):
        return _Branch(whole, windowed=bool(_UNBOUNDED_DOT.search(branch)), words=words)
    return _Branch(whole, re.compile(prefix + head, _FLAGS), width, words=words)


#: the catalog's patterns and those made of its wordings are about 660 (377 and 287 at 249 entries): a cache of 512
#: was walked through in the same order on every text and kept none of them (every search compiled its pattern again,
#: 66 ms a text where 3 ms do); a plugin's entries add theirs
BRANCH_CACHE = 8192


@functools.lru_cache(maxsize=BRANCH_CACHE)
def _branches(pattern: str) -> tuple[_Branch, ...]:
    flags = _LEADING_FLAGS.match(pattern)
    prefix, body = (flags.group(0), pattern[flags.end() :]) if flags else ("", pattern)
    shape = _top_level(body)
    if shape is None:
        return (
            _Branch(
                re.compile(pattern, _FLAGS), windowed=bool(_UNBOUNDED_DOT.search(body)), words=_words(pattern)
            ),
        )
    bars = [0, *(b + 1 for b in shape[0])]
    return tuple(
        _branch(prefix, body[start:end]) for start, end in zip(bars, [*shape[0], len(body)], strict=True)
    )


def _search_branch(branch: _Branch, text: str) -> re.Match[str] | None:
    if branch.words and not branch.words <= _text_words(text):
        return None  # a word every match holds is not in the text (a set's look-up, where a search reads the text)
    if branch.windowed and len(text) > WINDOW:
        for start in range(0, len(text), WINDOW - REACH):
            if found := branch.whole.search(text, start, start + WINDOW):
                return found
        return None
    if branch.head is None:
        return branch.whole.search(text)
    head = branch.head.search(text)
    first = head.start() if head else None
    # the tail may match anywhere after a head (DOTALL): where it fails after the first head it fails after every
    # later one, but for a head overlapping the first one (it may end sooner); those few are tried too
    while head is not None and first is not None and head.start() <= first + branch.head_width:
        if found := branch.whole.match(text, head.start()):
            return found
        head = branch.head.search(text, head.start() + 1)
    return None


def search(pattern: str, text: str) -> re.Match[str] | None:
    """`re.search(pattern, text, REGEX_FLAGS)` in time linear in the text. A branch `head.*tail` gives re.search's
    match exactly; a branch with a `.*` elsewhere is searched in windows (a match longer than REACH, or a lookahead
    reaching past its window, is not seen); any other branch is re.search itself."""
    best = None
    for branch in _branches(pattern):
        found = _search_branch(branch, text)
        if found is not None and (best is None or found.start() < best.start()):
            best = found
    return best


def issue_matches(issue: KnownIssue, text: str) -> bool:
    """`KnownIssue.matches`, through `search`."""
    return bool(text) and any(search(p, text) for p in issue.patterns) and _narrowed(issue, text)


def _narrowed(issue: KnownIssue, text: str) -> bool:
    """Whether `text` holds every pattern the entry's `requires` narrows its message with (the frames that tell it
    from the same words elsewhere), through `search`: true for an entry with none."""
    return all(search(p, text) for p in issue.requires)


def classify(text: str, issues: Iterable[KnownIssue] | None = None) -> list[KnownIssue]:
    """The known issues (default: the whole catalog) whose signature matches `text`, through `search`, most specific
    (most patterns required) first; a fallback class only where nothing else matches."""
    hits = [issue for issue in (catalog.ISSUES if issues is None else issues) if issue_matches(issue, text)]
    return sorted(_give_way(hits, lambda issue: issue), key=lambda issue: -len(issue.requires))


def _give_way(found: list[_T], issue_of: Callable[[_T], KnownIssue]) -> list[_T]:
    """`found` less what gives way to something more specific in it: a fallback class (a segfault, an import error,
    a hang) to an entry of its own cause, a launcher's summary to either."""
    if not found:
        return found
    least = min(issue_of(item).fallback for item in found)
    return [item for item in found if issue_of(item).fallback == least]


def _shown(span: str) -> str:
    span = (
        " ".join(span[: 4 * SPAN_CHARS].split()) + " " + " ".join(span[-4 * SPAN_CHARS :].split())
        if len(span) > 8 * SPAN_CHARS
        else " ".join(span.split())
    )
    return span if len(span) <= SPAN_CHARS else f"{span[:130]} … {span[-60:]}"


def _earliest(patterns: Iterable[str], text: str) -> re.Match[str] | None:
    """The hit of `patterns` that starts first in `text` (through `search`), or None."""
    return min((m for p in patterns if (m := search(p, text))), key=lambda m: m.start(), default=None)


def first_match(issue: KnownIssue, text: str) -> tuple[int, str] | None:
    """Position and text of the earliest pattern hit (the span itself, whitespace collapsed), or None."""
    first = _earliest(issue.patterns, text)
    return (first.start(), _shown(first.group(0))) if first else None


#: import names whose traceback frames back up a message-only match (not torch's: every traceback passes through it)
FRAME_NAMES = {
    "deepspeed": "deepspeed",
    "accelerate": "accelerate",
    "transformers": "transformers",
    "prodigy-plus-schedule-free": "prodigyplus",
    "mosaicml": "composer",
}
CONTEXT_CHARS = 80


#: The strength of a generic message's match that nothing in the log corroborates: named as "possibly" the entry
POSSIBLY = "possibly"
#: The strength of a match whose entry's `requires` or `evidence` the text holds too: what tells it from a look-alike
BACKED = "message and context"


def strength(issue: KnownIssue, text: str, frames_in: str | None = None) -> tuple[str, tuple[str, ...]]:
    """How strong a match is, and what backs it: "message and context" (the entry's `requires` matched: the
    frames or settings that tell it from a look-alike; for a generic message, its `evidence`), "message and
    frames" (a traceback frame of the entry's package), "message only" (a message another cause could print too),
    or "possibly" (a generic message, a signal or "unhandled system error", with none of its evidence: the entry
    is a guess to confirm, said so in every format)."""
    if issue.confirm:
        spans = [found.group(0) for pattern in issue.evidence if (found := search(pattern, text))]
        return (BACKED, tuple(_context(span) for span in spans)) if spans else (POSSIBLY, ())
    if issue.requires:
        spans = [found.group(0) for pattern in issue.requires if (found := search(pattern, text))]
        return BACKED, tuple(_context(span) for span in spans)
    name = FRAME_NAMES.get(issue.package)
    where = text if frames_in is None else frames_in
    frame = re.search(rf'File "[^"\n]{{0,300}}[/\\]{name}[/\\][^"\n]{{0,300}}"', where) if name else None
    return ("message and frames", (_context(frame.group(0)),)) if frame else ("message only", ())


def _context(span: str) -> str:
    span = _shown(span)
    return scrub_text(span if len(span) <= CONTEXT_CHARS else f"{span[:50]} … {span[-25:]}")


#: A message broken inside a sentence (a terminal's wrap, an indented continuation) or with doubled spaces reads as
#: one line with single spaces: what the matcher also searches, so no pattern has to allow for either.
_BREAKS = re.compile(r"[ \t]*\n[ \t]*|[ \t]{2,}")


def flattened(text: str) -> str:
    return _BREAKS.sub(" ", text)


#: What a cut match that is long enough says of itself (a shorter one is "possibly")
CUT_SHORT = "message cut short"


@dataclasses.dataclass(frozen=True)
class Match:
    """A known issue a text matches: how (`Kind`), where (a position in the text, approximate for a match made on
    a reshaped copy of it), the span that matched, the strength and what backs it, and how to confirm a
    "possibly"."""

    issue: KnownIssue
    kind: Kind
    position: int
    span: str
    strength: str
    context: tuple[str, ...] = ()
    confirm: str | None = None

    @property
    def possibly(self) -> bool:
        return self.strength == POSSIBLY


def _scaled(position: int, shape: str, text: str) -> int:
    """A position in a reshaped copy of `text` (flattened, quotes gone), as a position in `text`."""
    return position * len(text) // max(len(shape), 1)


def _worded(issue: KnownIssue, text: str, shown: str, kind: Kind, frames_in: str) -> Match | None:
    found = first_match(issue, shown)
    if found is None:
        return None
    how, context = strength(issue, shown, frames_in)
    confirm = issue.confirm or None if how == POSSIBLY else None
    return Match(issue, kind, _scaled(found[0], shown, text), found[1], how, context, confirm)


def _by_wording(text: str, seen: set[str]) -> list[Match]:
    """Matches of the entries' patterns as written, then on the text flattened, then loosened (case and quotes
    aside)."""
    out: list[Match] = []
    flat = flattened(text)
    loose = loose_form(bounded(flat))
    passes = [(text, Kind.WORDING, None), (flat, Kind.WORDING, None), (loose, Kind.LOOSE, loose_issue)]
    if flat == text:  # nothing was wrapped: the second pass would find what the first found
        del passes[1]
    for shown, kind, shape in passes:
        candidates = (
            catalog.ISSUES
            if shape is None
            else tuple(shape(issue) for issue in catalog.ISSUES if issue.id not in seen)
        )
        for issue in classify(shown, candidates):
            if issue.id not in seen and (match := _worded(issue, text, shown, kind, text)) is not None:
                # the loose pass matched a loosened copy: the match names the entry itself
                out.append(dataclasses.replace(match, issue=catalog.get(issue.id)))
                seen.add(issue.id)
    return out


def _cut(text: str, seen: set[str]) -> list[Match]:
    """Wordings whose distinctive leading part the text runs along, stopping there."""
    out = []
    hits = cut_hits(text, _leads())
    for issue_id, hit in clipped_hits(text, _inner()).items():
        hits.setdefault(issue_id, hit)
    for hit in hits.values():
        if hit.issue in seen:
            continue
        issue = catalog.get(hit.issue)
        # however its message matched: Python's "max() arg is an empty sequence" is ZeRO-3's only in stage3.py
        if not _narrowed(issue, text):
            continue
        where = located(text, hit.matched)
        sure = hit.certain and not issue.confirm
        said = (
            f"the text holds \u201c{_context(hit.matched)}\u201d from inside its message, the message's start cut "
            "or retyped away: the error's whole line (from the log) confirms it"
            if hit.clipped
            else f"the text stops after \u201c{_context(hit.matched)}\u201d: the error's whole line (from the log, "
            "not a title or an excerpt) confirms it"
        )
        position = where[0] if where else _scaled(hit.position, cut_form(text), text)
        span = _shown(where[1] if where else hit.matched)
        strength_ = CUT_SHORT if sure else POSSIBLY
        out.append(
            Match(issue, Kind.CUT, position, span, strength_, (), None if sure else issue.confirm or said)
        )
        seen.add(hit.issue)
    return out


def _framed(text: str, seen: set[str]) -> list[Match]:
    """Tracebacks raising an entry's exception type from the one place its check raises it, in other words."""
    out = []
    for shown in raised(text):
        for frame in _frames():
            if frame.issue not in seen and shown.is_of(frame):
                confirm = (
                    f"{frame.exception} raised by {frame.function} ({frame.file}), where this entry's message is "
                    "raised, but not in its words: the exception's own line confirms it"
                )
                where = f"{shown.exception} in {frame.function} ({frame.file})"
                out.append(
                    Match(catalog.get(frame.issue), Kind.FRAME, shown.position, where, POSSIBLY, (), confirm)
                )
                seen.add(frame.issue)
    confirm = (
        "a native stack names the function that raises it, its message cut: the error's own line confirms it"
    )
    for issue in catalog.ISSUES:
        if issue.id not in seen and issue.native_frames and (first := _earliest(issue.native_frames, text)):
            out.append(Match(issue, Kind.FRAME, first.start(), _shown(first.group(0)), POSSIBLY, (), confirm))
            seen.add(issue.id)
    return out


def _bannered(text: str, seen: set[str]) -> list[Match]:
    """What a library prints before an entry's error, without the error."""
    out = []
    confirm = "find the error these lines lead to, further down the log: its own line confirms it"
    for issue in catalog.ISSUES:
        if issue.id not in seen and issue.banners and (first := _earliest(issue.banners, text)):
            out.append(
                Match(issue, Kind.BANNER, first.start(), _shown(first.group(0)), POSSIBLY, (), confirm)
            )
            seen.add(issue.id)
    return out


def _paraphrased(text: str, seen: set[str]) -> list[Match]:
    """The failure named in prose (a title's "CUDA OOM", "loss is nan"), case and quotes aside: possibly the entry."""
    out = []
    loose = loose_form(bounded(flattened(text)))
    confirm = "the text names the failure in words, not by its message: the error's own lines from the log confirm it"
    for issue in catalog.ISSUES:
        if issue.id in seen or not issue.paraphrases:
            continue
        if first := _earliest(loose_issue(issue).paraphrases, loose):
            position = _scaled(first.start(), loose, text)
            out.append(Match(issue, Kind.PARAPHRASE, position, _shown(first.group(0)), POSSIBLY, (), confirm))
            seen.add(issue.id)
    return out


def matches(text: str) -> list[Match]:
    """Every known issue `text` matches, each once, by the strongest kind that matched it: its patterns as written
    (on the text, then flattened), loosened, a wording cut short, the raising frame, a banner, a paraphrase."""
    if not text:
        return []
    seen: set[str] = set()
    found = _decided(_by_wording(text, seen)) + _cut(text, seen) + _framed(text, seen) + _bannered(text, seen)
    return _give_way(found + _paraphrased(text, seen), lambda match: match.issue)


def _decided(found: list[Match]) -> list[Match]:
    """`found` less a "possibly" whose words another entry's match holds with its evidence: one message that two
    causes print (torch's shape check of a weight, under ZeRO-3 or FSDP) is the one whose evidence the text shows."""
    backed = {match.span for match in found if match.strength == BACKED}
    return [match for match in found if not (match.possibly and match.span in backed)]


def verdict(match: Match) -> Verdict:
    """What a match says of the stack whose error it is: `possibly` for generic words without their evidence;
    `unknown` for a class (a launcher's summary, a segfault), which says what kind of failure it was, not that the
    stack has a known bug; else `affected`: the failure showed there."""
    if match.issue.fallback:
        return Verdict.UNKNOWN
    return Verdict.POSSIBLY if match.possibly else Verdict.AFFECTED


def issue_ref(match: Match) -> IssueRef:
    """The known issue a run's case or a watched job's error carries: the entry with `verdict(match)`, how to confirm
    a "possibly", and how it matched."""
    return match.issue.to_ref(verdict(match), match.confirm, match.kind.value)


#: the kinds a run trusts first: a text's own message, before anything a structure or a paraphrase suggests
_WORDED = (Kind.WORDING, Kind.LOOSE)


def judged(texts: Iterable[str]) -> Match | None:
    """The known issue an error's texts match first (the raised error's, then what the ranks printed): by its message
    in any text before a structural or paraphrase match in any, its strength judged over every text (the evidence
    that confirms a generic message may be in what a rank printed, not in the error itself): what a run's case and
    `ds-doctor triage` both say."""
    texts = [text for text in texts if text]
    everything = "\n".join(texts)
    found = [matches(text) for text in texts]
    # a class in one text (the launcher's summary in the error) gives way to a cause in another (a rank's own lines)
    least = min((m.issue.fallback for hits in found for m in hits), default=0)
    found = [[m for m in hits if m.issue.fallback == least] for hits in found]
    for worded in (True, False):
        for hits in found:
            hits = [m for m in hits if (m.kind in _WORDED) == worded]
            if not hits:
                continue
            best = min(hits, key=lambda m: list(Kind).index(m.kind))
            if worded and best.strength == POSSIBLY:
                how, context = strength(best.issue, flattened(everything))
                if how != POSSIBLY:
                    return dataclasses.replace(best, strength=how, context=context, confirm=None)
            return best
    return None


@functools.lru_cache(maxsize=1)
def _leads() -> tuple[Lead, ...]:
    return leads(catalog.ISSUES)


@functools.lru_cache(maxsize=1)
def _inner() -> Inner:
    return inner_runs(catalog.ISSUES)


@functools.lru_cache(maxsize=1)
def _frames() -> tuple[Frame, ...]:
    from ds_doctor.knowledge.frames import shipped

    known = {issue.id for issue in catalog.ISSUES}
    return tuple(frame for frame in shipped() if frame.issue in known)


@dataclasses.dataclass(frozen=True)
class RaisedError:
    """An exception a probe caught on purpose, and what the classifier made of it (on its whole traceback)."""

    error: ErrorInfo
    hits: tuple[KnownIssue, ...]

    @classmethod
    def of(cls, exc: BaseException) -> RaisedError:
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(ErrorInfo.of(exc), tuple(classify(text)))

    @property
    def summary(self) -> str:
        return self.error.headline

    @property
    def traceback(self) -> str:
        return self.error.traceback

"""`ds-doctor triage`: match a user's log or traceback against every known issue.

The text is normalised first (`ds_doctor.knowledge.logtext`: bars, rank prefixes, interleaving, wrapping). For each
hit: the issue, why it happens, the affected versions judged against the versions *the log* shows (the installed
ones only for a package the log does not name, and the output says which), the remedy and the upstream
references, and the span that matched (scrubbed, since people paste these into tickets). Hits are listed in the
order their first match appears, because in a log the earliest error is usually the cause and later ones its
echoes (`ChildFailedError`, `'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'`). NCCL watchdog lines are
lined up across ranks (`ds_doctor.knowledge.watchdog`).

The log is a stranger's text, so its matching is bounded: the log is read through `ds_doctor.userinput` (its tail, a
stream or a compressed file up to a cap), and a catalog pattern of the form `head.*tail` (DOTALL) is searched as
re.search would, but tried at the first place its head matches only: re.search retries it at every later place
the head matches, each try running to the end of the text, which a log repeating the head makes quadratic (a
200 KB log of "server socket has failed to bind to " took 7 s in one pattern).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable, Mapping

from ds_doctor.knowledge.catalog import ISSUES
from ds_doctor.knowledge.issues import REGEX_FLAGS, KnownIssue
from ds_doctor.knowledge.logtext import log_versions, normalise
from ds_doctor.knowledge.peers import peer_findings
from ds_doctor.knowledge.watchdog import WatchdogReport, read_watchdog, watchdog_findings
from ds_doctor.redact import scrub_text
from ds_doctor.reports.records import Finding
from ds_doctor.reports.triage import TriageMatch, VersionUsed
from ds_doctor.userinput import MAX_LOG_BYTES, UserInputError, check_tree, log_text
from ds_doctor.userinput import read_log as read_input

MAX_INPUT_BYTES = MAX_LOG_BYTES  # a longer log is read from its tail
SPAN_CHARS = 200
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
    if width is None or _UNBOUNDED_DOT.search(head) or _UNBOUNDED_DOT.search(tail.removeprefix("?")):
        return _Branch(whole, windowed=bool(_UNBOUNDED_DOT.search(branch)))
    return _Branch(whole, re.compile(prefix + head, _FLAGS), width)


@functools.lru_cache(maxsize=512)
def _branches(pattern: str) -> tuple[_Branch, ...]:
    flags = _LEADING_FLAGS.match(pattern)
    prefix, body = (flags.group(0), pattern[flags.end() :]) if flags else ("", pattern)
    shape = _top_level(body)
    if shape is None:
        return (_Branch(re.compile(pattern, _FLAGS), windowed=bool(_UNBOUNDED_DOT.search(body))),)
    bars = [0, *(b + 1 for b in shape[0])]
    return tuple(
        _branch(prefix, body[start:end]) for start, end in zip(bars, [*shape[0], len(body)], strict=True)
    )


def _search_branch(branch: _Branch, text: str) -> re.Match[str] | None:
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
    return (
        bool(text)
        and any(search(p, text) for p in issue.patterns)
        and all(search(p, text) for p in issue.requires)
    )


def classify(text: str, issues: Iterable[KnownIssue] | None = None) -> list[KnownIssue]:
    """`catalog.classify`, through `search`: the issues whose signature matches, most specific first."""
    hits = [issue for issue in (ISSUES if issues is None else issues) if issue_matches(issue, text)]
    return sorted(hits, key=lambda issue: -len(issue.requires))


def _shown(span: str) -> str:
    span = (
        " ".join(span[: 4 * SPAN_CHARS].split()) + " " + " ".join(span[-4 * SPAN_CHARS :].split())
        if len(span) > 8 * SPAN_CHARS
        else " ".join(span.split())
    )
    return span if len(span) <= SPAN_CHARS else f"{span[:130]} … {span[-60:]}"


def first_match(issue: KnownIssue, text: str) -> tuple[int, str] | None:
    """Position and text of the earliest pattern hit (the span itself, whitespace collapsed), or None."""
    hits = [m for p in issue.patterns if (m := search(p, text))]
    if not hits:
        return None
    first = min(hits, key=lambda m: m.start())
    return first.start(), _shown(first.group(0))


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


def strength(issue: KnownIssue, text: str) -> tuple[str, tuple[str, ...]]:
    """How strong a match is, and what backs it: "message and context" (the entry's `requires` matched: the
    frames or settings that tell it from a look-alike; for a generic message, its `evidence`), "message and
    frames" (a traceback frame of the entry's package), "message only" (a message another cause could print too),
    or "possibly" (a generic message, a signal or "unhandled system error", with none of its evidence: the entry
    is a guess to confirm, said so in every format)."""
    if issue.confirm:
        spans = [found.group(0) for pattern in issue.evidence if (found := search(pattern, text))]
        return ("message and context", tuple(_context(span) for span in spans)) if spans else (POSSIBLY, ())
    if issue.requires:
        spans = [found.group(0) for pattern in issue.requires if (found := search(pattern, text))]
        return "message and context", tuple(_context(span) for span in spans)
    name = FRAME_NAMES.get(issue.package)
    frame = re.search(rf'File "[^"\n]{{0,300}}[/\\]{name}[/\\][^"\n]{{0,300}}"', text) if name else None
    return ("message and frames", (_context(frame.group(0)),)) if frame else ("message only", ())


def _context(span: str) -> str:
    span = _shown(span)
    return scrub_text(span if len(span) <= CONTEXT_CHARS else f"{span[:50]} … {span[-25:]}")


def versions_used(text: str, installed: Mapping[str, str | None]) -> dict[str, VersionUsed]:
    """For every package a known issue is judged on: the version the log shows, else the installed one."""
    packages = sorted({issue.package for issue in ISSUES} | {"torch"})
    from_log = log_versions(text, packages)
    return {
        p: VersionUsed(from_log[p], "the log")
        if p in from_log
        else VersionUsed(installed.get(p), "this machine")
        for p in packages
    }


#: A message broken inside a sentence (a terminal's wrap, an indented continuation) or with doubled spaces reads as
#: one line with single spaces: what the matcher also searches, so no pattern has to allow for either.
_BREAKS = re.compile(r"[ \t]*\n[ \t]*|[ \t]{2,}")


def flattened(text: str) -> str:
    return _BREAKS.sub(" ", text)


def _matches(
    text: str, used: Mapping[str, VersionUsed], installed: Mapping[str, str | None]
) -> list[TriageMatch]:
    versions = {p: v.version for p, v in used.items()}
    flat = flattened(text)
    direct = classify(text)
    seen = {issue.id for issue in direct}
    matches = []
    for issue in [*direct, *(i for i in classify(flat) if i.id not in seen)]:
        found = first_match(issue, text) or first_match(issue, flat)
        if found is None:  # pragma: no cover - classify only returns issues whose patterns matched
            continue
        version = used.get(issue.package, VersionUsed(installed.get(issue.package), "this machine"))
        how, context = strength(issue, text if issue.id in seen else flat)
        matches.append(
            TriageMatch(
                issue.to_ref(issue.version_verdict(versions)),
                issue.package,
                issue.cause,
                version,
                found[0],
                scrub_text(found[1]),
                how,
                context,
                issue.confirm if how == POSSIBLY else None,
            )
        )
    return in_order(matches, text)


#: timestamps a log line starts with, as glog (`E1121 04:51:10.402917`, torch's C++) and Python's logging
#: (`2026-11-21 04:51:10,402`) write them; the year is left out of both comparisons (glog has none)
#: glog's prefix: the month without its leading zero from January to September (`E626 05:14:36.123`)
_GLOG_STAMP = re.compile(r"\b[EWIF](\d{3,4}) (\d{2}:\d{2}:\d{2}(?:\.\d+)?)\b")
_ISO_STAMP = re.compile(r"\b\d{4}-(\d{2})-(\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d+))?\b")


def _stamp(text: str, position: int) -> str | None:
    """The time on the line holding `position` (MMDD HH:MM:SS.ffffff, comparable as a string), or None."""
    end = text.find("\n", position)
    line = text[text.rfind("\n", 0, position) + 1 : len(text) if end < 0 else end]
    if found := _GLOG_STAMP.search(line):
        return f"{found[1].zfill(4)} {found[2]}"
    if found := _ISO_STAMP.search(line):
        return f"{found[1]}{found[2]} {found[3]}.{found[4] or '0'}"
    return None


def in_order(matches: list[TriageMatch], text: str) -> list[TriageMatch]:
    """The matches by when their lines were written where every one's line carries a time (ranks' logs pasted one
    after another: a heartbeat abort printed first may come 8 minutes after the collective timeout it echoes), else
    by where they stand in the log."""
    stamped = [(_stamp(text, m.position), m) for m in matches]
    if len(matches) > 1 and all(stamp for stamp, _ in stamped):
        return [m for _, m in sorted(stamped, key=lambda pair: (pair[0] or "", pair[1].position))]
    return sorted(matches, key=lambda m: m.position)


@dataclasses.dataclass(frozen=True)
class LogReading:
    """Everything `triage` reads in one log: known issues, the versions it judged them on, the watchdog's story."""

    matches: list[TriageMatch]
    versions: dict[str, VersionUsed]
    watchdog: WatchdogReport | None
    findings: list[Finding]
    notes: tuple[str, ...] = ()  # what of the input was not read ("read the last 32 MiB of 1.2 GiB")


#: entries whose message is other ranks echoing a death: the log is searched for the rank that failed first
ECHO_ISSUES = frozenset({"nccl_remote_error_peer_exited"})


def read_log(
    text: str, installed: Mapping[str, str | None], world_size: int | None = None, notes: Iterable[str] = ()
) -> LogReading:
    normal = normalise(text)
    watchdog = read_watchdog(normal, world_size, written=text)
    used = versions_used(normal, installed)
    matches = _matches(normal, used, installed)
    findings = watchdog_findings(watchdog) if watchdog else []
    # read as given: the rank prefixes say who failed first
    if any(m.issue.id in ECHO_ISSUES for m in matches):
        findings += [dataclasses.replace(f, message=scrub_text(f.message)) for f in peer_findings(text)]
    return LogReading(matches, {p: v for p, v in used.items() if v.version}, watchdog, findings, tuple(notes))


def triage(text: str, installed: Mapping[str, str | None]) -> list[TriageMatch]:
    """The known issues a log shows (`read_log` for everything it says)."""
    return read_log(text, installed).matches


@dataclasses.dataclass(frozen=True)
class LogText:
    text: str
    notes: tuple[str, ...]


def read_source(source: str) -> LogText:
    """What `triage FILE|-` reads: the log's tail (a stream's, a .gz/.bz2/.xz log's decompressed) as text, and what
    was left out; UserInputError (one line, exit 2) for what is not a readable log."""
    log = read_input(source, limit=MAX_INPUT_BYTES)
    return LogText(log_text(log.data), (log.note,) if log.note else ())


def _report_data(text: str, name: str) -> dict | None:
    """The JSON of a ds-doctor report, checked; None where the text does not claim to be one."""
    import json

    from ds_doctor.userinput import check_report

    if not re.match(r"\s*\{", text):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    tool = data.get("tool") if isinstance(data, dict) else None
    if not isinstance(tool, dict) or tool.get("name") != "ds-doctor" or "results" not in data:
        return None
    check_tree(data, name, UserInputError)  # from here on it says it is a report, so it has to be one
    check_report(data, name, UserInputError)
    return data


def read_report(text: str, name: str = "the report") -> LogReading | None:
    """A ds-doctor report (of `run`, or of a `watch` in a job) read as triage reads a log: the known issues its
    failing cases' errors show, judged on the report's own package versions, and their findings with the case
    named. None where the text is not such a report; UserInputError where it says it is one and is not."""
    from ds_doctor.reports.records import FAILING, Report

    data = _report_data(text, name)
    if data is None:
        return None
    try:
        report = Report.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UserInputError(
            f"{name}: not a valid ds-doctor report ({type(exc).__name__}: {exc})"[:300]
        ) from None
    failing = [r for r in report.results if r.outcome in FAILING]
    errors = "\n".join(
        part
        for r in failing
        for part in (
            r.reason or "",
            *(s.traceback or "" for s in r.ranks),
            *(s.stderr_tail or "" for s in r.ranks),
        )
        if part
    )
    installed = {k: v for k, v in report.env.packages.items() if isinstance(v, str)}
    reading = read_log(errors, installed)
    findings = [
        dataclasses.replace(f, message=f"{r.key}: {f.message}")
        for r in failing
        for f in r.findings
        if not f.severity.value == "info"
    ]
    return dataclasses.replace(reading, findings=reading.findings + findings)

"""`ds-doctor triage`: match a user's log or traceback against every known issue.

The text is normalised first (`ds_doctor.knowledge.logtext`: bars, rank prefixes, interleaving, wrapping). For each
hit: the issue, why it happens, the affected versions judged against the versions *the log* shows (the installed
ones only for a package the log does not name, and the output says which), the remedy and the upstream
references, and the span that matched (scrubbed, since people paste these into tickets). Hits are listed in the
order their first match appears, because in a log the earliest error is usually the cause and later ones its
echoes (`ChildFailedError`, `'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'`). NCCL watchdog lines are
lined up across ranks (`ds_doctor.knowledge.watchdog`).

The log is a stranger's text, so its reading is bounded (`ds_doctor.userinput`: its tail, a stream or a compressed
file up to a cap), and it is matched by the one matcher a run uses too (`ds_doctor.knowledge.matching`: a search
linear in the text, and the strength of each match).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from ds_doctor.knowledge.catalog import ISSUES
from ds_doctor.knowledge.logtext import log_version_lists, normalise
from ds_doctor.knowledge.matching import matches
from ds_doctor.knowledge.peers import peer_findings
from ds_doctor.knowledge.watchdog import WatchdogReport, read_watchdog, watchdog_findings
from ds_doctor.redact import scrub_text
from ds_doctor.reports.model import Finding
from ds_doctor.reports.triage import TriageMatch, VersionUsed
from ds_doctor.userinput import MAX_LOG_BYTES, UserInputError, check_tree, log_text
from ds_doctor.userinput import read_log as read_input

MAX_INPUT_BYTES = MAX_LOG_BYTES  # a longer log is read from its tail


def versions_used(text: str, installed: Mapping[str, str | None]) -> dict[str, VersionUsed]:
    """For every package a known issue is judged on: the version the log shows, else the installed one."""
    packages = sorted({issue.package for issue in ISSUES} | {"torch"})
    from_log = log_version_lists(text, packages)
    return {
        p: VersionUsed(from_log[p][0], "the log", from_log[p][1:])
        if p in from_log
        else VersionUsed(installed.get(p), "this machine")
        for p in packages
    }


def _matches(
    text: str, used: Mapping[str, VersionUsed], installed: Mapping[str, str | None]
) -> list[TriageMatch]:
    versions = {p: v.version for p, v in used.items()}
    found = []
    for match in matches(text):
        issue = match.issue
        version = used.get(issue.package, VersionUsed(installed.get(issue.package), "this machine"))
        found.append(
            TriageMatch(
                issue.to_ref(issue.version_verdict(versions), confirm=match.confirm, match=match.kind.value),
                issue.package,
                issue.cause,
                version,
                match.position,
                scrub_text(match.span),
                match.strength,
                match.context,
                match.confirm if match.possibly else None,
                match.kind.value,
                issue.fallback,
            )
        )
    return in_order(found, text)


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
    from ds_doctor.reports.model import FAILING, Report

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

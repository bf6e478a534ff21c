"""`ds-doctor triage`: match a user's log or traceback against every known issue.

The text is normalised first (`doctor.knowledge.logtext`: bars, rank prefixes, interleaving, wrapping). For each
hit: the issue, why it happens, the affected versions judged against the versions *the log* shows (the installed
ones only for a package the log does not name, and the output says which), the remedy and the upstream
references, and the span that matched (scrubbed, since people paste these into tickets). Hits are listed in the
order their first match appears, because in a log the earliest error is usually the cause and later ones its
echoes (`ChildFailedError`, `'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'`). NCCL watchdog lines are
lined up across ranks (`doctor.knowledge.watchdog`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from doctor.knowledge.catalog import ISSUES, classify
from doctor.knowledge.issues import KnownIssue
from doctor.knowledge.logtext import log_versions, normalise
from doctor.knowledge.watchdog import WatchdogReport, read_watchdog, watchdog_findings
from doctor.redact import scrub_text
from reports.records import Finding
from reports.triage import TriageMatch, VersionUsed

MAX_INPUT_BYTES = 32 * 2**20  # a longer log is read from its tail
SPAN_CHARS = 200
_FLAGS = re.MULTILINE | re.DOTALL


def _shown(span: str) -> str:
    span = " ".join(span.split())
    return span if len(span) <= SPAN_CHARS else f"{span[:130]} … {span[-60:]}"


def first_match(issue: KnownIssue, text: str) -> tuple[int, str] | None:
    """Position and text of the earliest pattern hit (the span itself, whitespace collapsed), or None."""
    hits = [m for p in issue.patterns if (m := re.search(p, text, _FLAGS))]
    if not hits:
        return None
    first = min(hits, key=lambda m: m.start())
    return first.start(), _shown(first.group(0))


def versions_used(text: str, installed: Mapping[str, str | None]) -> dict[str, VersionUsed]:
    """For every package a known issue is judged on: the version the log shows, else the installed one."""
    packages = sorted({issue.package for issue in ISSUES} | {"torch"})
    from_log = log_versions(text, packages)
    return {p: VersionUsed(from_log[p], "the log") if p in from_log else VersionUsed(installed.get(p), "this machine")
            for p in packages}


def _matches(text: str, used: Mapping[str, VersionUsed], installed: Mapping[str, str | None]) -> list[TriageMatch]:
    versions = {p: v.version for p, v in used.items()}
    matches = []
    for issue in classify(text):
        found = first_match(issue, text)
        if found is None:  # pragma: no cover - classify only returns issues whose patterns matched
            continue
        version = used.get(issue.package, VersionUsed(installed.get(issue.package), "this machine"))
        matches.append(TriageMatch(issue.to_ref(issue.version_verdict(versions)), issue.package, issue.cause,
                                   version, found[0], scrub_text(found[1])))
    return sorted(matches, key=lambda m: m.position)


@dataclasses.dataclass(frozen=True)
class LogReading:
    """Everything `triage` reads in one log: known issues, the versions it judged them on, the watchdog's story."""

    matches: list[TriageMatch]
    versions: dict[str, VersionUsed]
    watchdog: WatchdogReport | None
    findings: list[Finding]


def read_log(text: str, installed: Mapping[str, str | None], world_size: int | None = None) -> LogReading:
    normal = normalise(text)
    watchdog = read_watchdog(normal, world_size)
    used = versions_used(normal, installed)
    return LogReading(_matches(normal, used, installed), {p: v for p, v in used.items() if v.version},
                      watchdog, watchdog_findings(watchdog) if watchdog else [])


def triage(text: str, installed: Mapping[str, str | None]) -> list[TriageMatch]:
    """The known issues a log shows (`read_log` for everything it says)."""
    return read_log(text, installed).matches


def read_report(text: str) -> LogReading | None:
    """A ds-doctor report (of `run`, or of a `watch` in a job) read as triage reads a log: the known issues its
    failing cases' errors show, judged on the report's own package versions, and their findings with the case
    named. None where the text is not such a report."""
    import json

    from reports.records import FAILING, Report

    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or (data.get("tool") or {}).get("name") != "ds-doctor" or "results" not in data:
        return None
    report = Report.from_dict(data)
    failing = [r for r in report.results if r.outcome in FAILING]
    errors = "\n".join(part for r in failing for part in (r.reason or "", *(s.traceback or "" for s in r.ranks),
                                                          *(s.stderr_tail or "" for s in r.ranks)) if part)
    reading = read_log(errors, (report.env or {}).get("packages") or {})
    findings = [dataclasses.replace(f, message=f"{r.key}: {f.message}") for r in failing for f in r.findings
                if not f.severity.value == "info"]
    return dataclasses.replace(reading, findings=reading.findings + findings)

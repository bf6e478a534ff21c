"""JUnit XML from a report (`ds-doctor run --junit FILE`): one testsuite per probe family, one testcase per case.

`fail` is a <failure>; `error` and `timeout` are <error>; `skip` is <skipped> with its reason, and so is `not_run` (a
stopped run's unfinished case: its message says it was not run, and why); `pass`,
`xfail` and `xpass` pass (xfail/xpass never fail a run), the last two with a <system-out> saying what
they found. Built from the report, so every string is already scrubbed; every string goes through
`ds_doctor.reports.safe.xml_text` (the control characters XML 1.0 forbids shown escaped: the file stays well-formed),
and ElementTree escapes markup, quotes and `]]>`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict

from ds_doctor.reports.model import CaseResult, Outcome, Report, parse_time
from ds_doctor.reports.safe import xml_text

MESSAGE_CHARS = 500


def _problem(result: CaseResult) -> tuple[str, str, str] | None:
    """(element, type, body) for a case that did not pass, else None."""
    reason = result.reason or result.outcome.value
    if result.outcome == Outcome.FAIL:
        body = "\n".join(
            f"[{f.severity.value}] {f.invariant} (rank {f.rank}, {f.stage}): {f.message}"
            for f in result.findings
        )
        return "failure", "fail", body or reason
    if result.outcome in (Outcome.ERROR, Outcome.TIMEOUT):
        tails = [r.traceback or r.stderr_tail or "" for r in result.ranks]
        body = "\n\n".join(
            f"rank {r.rank}: {r.reason or r.outcome}\n{t}" for r, t in zip(result.ranks, tails, strict=True)
        )
        return "error", result.outcome.value, body or reason
    return None


def _not_run_message(report: Report, result: CaseResult) -> str:
    """`not run: the run stopped ... (Stopped by SIGTERM after 12 of 47 cases: 35 not run)`."""
    said = f" ({report.stopped.headline})" if report.stopped else ""
    return f"{result.reason or 'not run'}{said}"[:MESSAGE_CHARS]


def _element(parent: ET.Element, tag: str, text: str | None = None, **attributes: str) -> ET.Element:
    """A child element, its attribute values and text made safe for XML."""
    element = ET.SubElement(parent, tag, {key: xml_text(value) for key, value in attributes.items()})
    if text is not None:
        element.text = xml_text(text)
    return element


def _run_seconds(report: Report, fallback: float) -> float:
    """From the report's start to its end; the sum of the cases where the times do not parse (a hostile report)."""
    try:
        return max((parse_time(report.finished_at) - parse_time(report.started_at)).total_seconds(), 0.0)
    except (TypeError, ValueError, AttributeError):
        return fallback


def render_junit(report: Report) -> str:
    by_probe: dict[str, list[CaseResult]] = defaultdict(list)
    for result in report.results:
        by_probe[result.probe].append(result)
    host = str(report.hardware.host or "")
    timestamp = report.started_at.removesuffix("Z")
    root = ET.Element("testsuites", name="ds-doctor")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for probe, results in by_probe.items():
        counts = {
            "tests": len(results),
            "failures": sum(r.outcome == Outcome.FAIL for r in results),
            "errors": sum(r.outcome in (Outcome.ERROR, Outcome.TIMEOUT) for r in results),
            "skipped": sum(r.outcome in (Outcome.SKIP, Outcome.NOT_RUN) for r in results),
            "time": sum(r.duration_s for r in results),
        }
        suite = _element(
            root,
            "testsuite",
            name=probe,
            timestamp=timestamp,
            hostname=host,
            **{k: (f"{v:.3f}" if k == "time" else str(v)) for k, v in counts.items()},
        )
        for result in results:
            case = _element(
                suite,
                "testcase",
                name=result.key,
                classname=f"ds-doctor.{probe}",
                time=f"{result.duration_s:.3f}",
            )
            problem = _problem(result)
            if problem is not None:
                element, kind, body = problem
                _element(case, element, body, message=(result.reason or kind)[:MESSAGE_CHARS], type=kind)
            elif result.outcome == Outcome.SKIP:
                _element(case, "skipped", message=(result.reason or "skipped")[:MESSAGE_CHARS])
            elif result.outcome == Outcome.NOT_RUN:
                _element(case, "skipped", message=_not_run_message(report, result))
            elif result.outcome in (Outcome.XFAIL, Outcome.XPASS):
                issue = result.known_issue
                said = (
                    f" known issue {issue.id}: {issue.verdict.value}" if issue else " known issue None: None"
                )
                _element(case, "system-out", f"{result.outcome.value}: {result.reason or ''}{said}")
        for key, value in counts.items():
            totals[key] += value
    # the run's wall time: cases run side by side on ranks
    totals["time"] = _run_seconds(report, totals["time"])
    root.attrib.update({k: (f"{v:.3f}" if k == "time" else str(int(v))) for k, v in totals.items()})
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

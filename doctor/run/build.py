"""Build the report from case results (the one place every string is scrubbed) and write its files."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import ds_doctor
from ds_doctor.files import CannotWrite, disk_failure, safe_component, write_atomic
from ds_doctor.redact import Anonymizer, scrub
from ds_doctor.reports.html import render_html
from ds_doctor.reports.markdown import render_markdown
from ds_doctor.reports.records import SCHEMA_VERSION, CaseResult, Report, RunStop, format_time, parse_time


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def anonymize(data: Any, host: str) -> Any:
    """`--anonymize`: host and user names, IPs and GPU UUIDs replaced by stable placeholders."""
    return Anonymizer.for_this_machine(extra_hosts=[host])(data)


def clean_result(result: CaseResult, *, anonymized: bool = False, host: str = "") -> CaseResult:
    """A case result as the report will hold it (scrubbed, anonymized with `--anonymize`), for whoever shows it
    before the report exists (the console's line per finished case)."""
    data = scrub(result.to_dict())
    return CaseResult.from_dict(anonymize(data, host) if anonymized else data)


def shown_result(result: CaseResult, *, anonymized: bool = False, host: str = "") -> CaseResult:
    """`clean_result` of what a finished case's line shows while the run goes on: its outcome, time, reason, known
    issue and measures. Its device maps, findings, per-rank summaries and notes wait for the report (scrubbing
    them for each case as it finished cost ~0.5 s of a level-2 run's CPU, issue 38)."""
    summary = dataclasses.replace(result, findings=(), device_map=(), ranks=(), notes={}, series=())
    return clean_result(summary, anonymized=anonymized, host=host)


# keyword-only, each section named at the call: the one way a report is made from run data
def build_report(  # noqa: PLR0913
    *,
    started: dt.datetime,
    finished: dt.datetime,
    level: int,
    argv: tuple[str, ...],
    env: Mapping[str, Any],
    hardware: Mapping[str, Any],
    results: list[CaseResult],
    run_dir: Path | None,
    anonymized: bool = False,
    nodes: tuple[Mapping[str, Any], ...] = (),
    stacks: tuple[Mapping[str, Any], ...] = (),
    stopped: RunStop | None = None,
) -> Report:
    """The one place a report is built: every string is scrubbed here (and with `anonymized`, host and user
    names, IPs and GPU UUIDs replaced), before any renderer sees it."""
    raw = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "ds-doctor", "version": ds_doctor.__version__},
        "started_at": format_time(started),
        "finished_at": format_time(finished),
        "command": ["ds-doctor", *argv],
        "level": level,
        "run_dir": str(run_dir) if run_dir else None,
        "env": env,
        "hardware": hardware,
        "results": [r.to_dict() for r in results],
        "nodes": [dict(node) for node in nodes],
        **({"stacks": [dict(stack) for stack in stacks]} if stacks else {}),
        **({"stopped": stopped.to_dict()} if stopped else {}),
    }
    clean = scrub(raw)
    if anonymized:
        clean = anonymize(clean, str(hardware.get("host") or ""))
    return Report.from_dict(clean)


def report_basename(report: Report) -> str:
    """`ds-doctor-<host>-<time>`: the host and time come from the report (a file someone handed over when it is
    re-rendered), so each is reduced to one safe path component."""
    try:
        when = parse_time(report.started_at).strftime("%Y%m%dT%H%M%SZ")
    except (TypeError, ValueError, AttributeError):
        when = "unknown-time"
    return f"ds-doctor-{safe_component(report.hardware.host)}-{when}"


def write_reports_of_run(report: Report, out_dir: Path, run_dir: Path | None) -> dict[str, Path]:
    """`write_reports` for a run: where the disk refuses them, one line that says the results are safe in the run
    directory and how to write the report from it."""
    try:
        return write_reports(report, out_dir)
    except OSError as exc:
        line = disk_failure(exc)
        if line is None or run_dir is None:
            raise
        raise CannotWrite(
            f"{line}; every result is in {run_dir}: `ds-doctor report {run_dir}` writes the report once there is room"
        ) from None


def write_reports(report: Report, out_dir: Path, suffix: str = "") -> dict[str, Path]:
    """Write the JSON and the ticket Markdown atomically, never over an existing report (a second run
    writing into the same directory in the same second gets its own names)."""
    base = report_basename(report) + suffix
    text = report.to_json() + "\n"
    for attempt in range(100):
        name = base if attempt == 0 else f"{base}-{os.getpid()}-{attempt}"
        paths = {"json": out_dir / f"{name}.json", "markdown": out_dir / f"{name}.md"}
        try:
            write_atomic(paths["json"], text, exclusive=True)
        except FileExistsError:
            continue
        paths["html"] = out_dir / f"{name}.html"
        try:
            write_atomic(paths["markdown"], render_markdown(report, full_report=paths["json"].name))
            write_atomic(paths["html"], render_html(report))
        except OSError:
            # a full or failing disk: no JSON left without its Markdown (a ticket gets both or none)
            for written in paths.values():
                written.unlink(missing_ok=True)
            raise
        return paths
    raise RuntimeError(f"could not find a free report name for {base} in {out_dir}")

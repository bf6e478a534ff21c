"""Build the report from case results (the one place every string is scrubbed) and write its files."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import secrets
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import ds_doctor
from ds_doctor.files import CannotWrite, disk_failure, foreign_in_path, safe_component, write_atomic
from ds_doctor.redact import Anonymizer, scrub
from ds_doctor.reports.html import render_html
from ds_doctor.reports.markdown import render_markdown
from ds_doctor.reports.model import SCHEMA_VERSION, CaseResult, Report, RunStop, format_time, parse_time


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


#: Names tried past the report's own and its process's: random ones, which no writer of the folder can take beforehand
RANDOM_NAMES = 8


def _report_names(base: str) -> Iterator[str]:
    """The names a report may take, in order: its own; its process's (a second run in the same folder and second);
    then random ones. The first 100 are predictable from the report and a pid: a writer of the output folder may have
    taken them all."""
    yield base
    yield from (f"{base}-{os.getpid()}-{attempt}" for attempt in range(1, 100))
    yield from (f"{base}-{secrets.token_hex(8)}" for _ in range(RANDOM_NAMES))


def write_reports(report: Report, out_dir: Path, suffix: str = "") -> dict[str, Path]:
    """Write the JSON and the ticket Markdown atomically, never over an existing report (a second run
    writing into the same directory in the same second gets its own names). A name whose Markdown or HTML cannot be
    put in place (a folder planted there) is given up for the next; no free name is one line naming the folder."""
    base = report_basename(report) + suffix
    text = report.to_json() + "\n"
    # checked again as the reports are written (the folder was checked when the command line was read): a folder on
    # the way swapped meanwhile for another user's link is not followed
    if (found := foreign_in_path(out_dir)) is not None:
        raise CannotWrite(
            f"{out_dir}: {found[0]} is now a link owned by another user (uid {found[1]}); not followed"
        )
    for name in _report_names(base):
        paths = {"json": out_dir / f"{name}.json", "markdown": out_dir / f"{name}.md"}
        try:
            write_atomic(paths["json"], text, exclusive=True)
        except FileExistsError:
            continue
        paths["html"] = out_dir / f"{name}.html"
        written = [paths["json"]]
        try:
            write_atomic(paths["markdown"], render_markdown(report, full_report=paths["json"].name))
            written.append(paths["markdown"])
            write_atomic(paths["html"], render_html(report))
        except OSError as exc:
            # no JSON left without its Markdown (a ticket gets both or none); what was there before is left be
            for path in written:
                path.unlink(missing_ok=True)
            if disk_failure(exc) is not None:
                raise  # a full or failing disk: no other name helps
            continue
        return paths
    raise CannotWrite(
        f"{out_dir}: no free name for the report {base}.json: every name tried is taken (another writer of that "
        "folder?); name another --out"
    )

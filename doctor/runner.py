"""The run pipeline: select -> plan -> launch -> gather -> build the report -> write it -> exit code.

Each step is a small function; rendering is left to `reports/`, which only reads the report.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import doctor
import probes
from doctor import env as envmod
from doctor import recover
from doctor.files import write_atomic
from doctor.health import health_results
from doctor.launch import EventSink, run_group
from doctor.outcomes import FAILING, ExitCode
from doctor.plan import Hardware, LaunchGroup, Skip, default_nproc, detect_hardware, keyword_matcher, plan, select_cases
from doctor.redact import Anonymizer, scrub
from doctor.results import merge_case, skipped_case
from probes.base import Case
from reports.markdown import render_markdown
from reports.model import CaseResult, Report


@dataclasses.dataclass(frozen=True)
class RunOptions:
    level: int = 2
    keyword: str | None = None
    out_dir: Path = Path("ds-doctor-reports")
    nproc: int | None = None
    timeout_s: float | None = None
    argv: tuple[str, ...] = ()
    anonymize: bool = False


@dataclasses.dataclass(frozen=True)
class RunPlan:
    cases: list[Case]
    hardware: Hardware | None
    nproc: int
    groups: list[LaunchGroup]
    skips: list[Skip]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def iso(moment: dt.datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def node_world_size(hardware: Hardware, nproc: int | None = None) -> int | None:
    """The world size the hardware families add: all the GPUs (or --nproc); none on a CPU node."""
    if hardware.device_kind != "cuda":
        return None
    return nproc or default_nproc(hardware)


def make_plan(options: RunOptions, hardware: Hardware | None = None) -> RunPlan:
    """Which cases run where. Level 1 plans nothing (environment and hardware only)."""
    if options.level < 2:
        return RunPlan([], hardware, 0, [], [])
    hardware = hardware or detect_hardware()
    nproc = options.nproc or default_nproc(hardware)
    cases = select_cases(probes.all_cases(node_world_size(hardware, nproc)), level=options.level,
                         keyword=options.keyword)
    if not cases:
        return RunPlan(cases, hardware, 0, [], [])
    groups, skips = plan(cases, hardware, nproc)
    return RunPlan(cases, hardware, nproc, groups, skips)


def execute(run_plan: RunPlan, run_dir: Path, versions: dict[str, str | None], options: RunOptions,
            on_event: EventSink) -> list[CaseResult]:
    """Run every launch group and merge each case's per-rank lines; results in case order."""
    specs = {spec.name: spec for spec in probes.specs()}
    by_id: dict[str, CaseResult] = {}
    for skip in run_plan.skips:
        by_id[skip.case.id] = skipped_case(skip.case, skip.device_kind, skip.reason)
    for group in run_plan.groups:
        lines = run_group(group, run_dir, timeout_override=options.timeout_s, on_event=on_event)
        for case in group.cases:
            by_id[case.id] = merge_case(case, specs[case.probe], lines[case.id], group.device_kind, versions)
    return [by_id[case.id] for case in run_plan.cases if case.id in by_id]


def selected_health(hardware: dict[str, Any], keyword: str | None) -> list[CaseResult]:
    """The GPU health results (level 1 and up), filtered by `-k` like every other case."""
    matcher = keyword_matcher(keyword)
    return [r for r in health_results(hardware.get("gpus") or [], hardware.get("gpus_reason")) if matcher(r.case)]


def build_report(*, started: dt.datetime, finished: dt.datetime, level: int, argv: tuple[str, ...],
                 env: dict[str, Any], hardware: dict[str, Any], results: list[CaseResult],
                 run_dir: Path | None, anonymize: bool = False) -> Report:
    """The one place a report is built: every string is scrubbed here (and with `anonymize`, host and user
    names, IPs and GPU UUIDs replaced), before any renderer sees it."""
    raw = {
        "schema_version": 1,
        "tool": {"name": "ds-doctor", "version": doctor.__version__},
        "started_at": iso(started),
        "finished_at": iso(finished),
        "command": ["ds-doctor", *argv],
        "level": level,
        "run_dir": str(run_dir) if run_dir else None,
        "env": env,
        "hardware": hardware,
        "results": [r.to_dict() for r in results],
    }
    clean = scrub(raw)
    if anonymize:
        clean = Anonymizer.for_this_machine(extra_hosts=[str(hardware.get("host") or "")])(clean)
    return Report.from_dict(clean)


def report_basename(report: Report, started: dt.datetime) -> str:
    return f"ds-doctor-{report.hardware['host']}-{started.strftime('%Y%m%dT%H%M%SZ')}"


def parse_iso(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def write_reports(report: Report, out_dir: Path, started: dt.datetime, suffix: str = "") -> dict[str, Path]:
    """Write the JSON and Markdown reports atomically, never over an existing report (a second run
    writing into the same directory in the same second gets its own names)."""
    base = report_basename(report, started) + suffix
    text = {"json": report.to_json() + "\n", "markdown": render_markdown(report)}
    for attempt in range(100):
        name = base if attempt == 0 else f"{base}-{os.getpid()}-{attempt}"
        paths = {"json": out_dir / f"{name}.json", "markdown": out_dir / f"{name}.md"}
        try:
            write_atomic(paths["json"], text["json"], exclusive=True)
        except FileExistsError:
            continue
        write_atomic(paths["markdown"], text["markdown"])
        return paths
    raise RuntimeError(f"could not find a free report name for {base} in {out_dir}")


def exit_code(report: Report) -> ExitCode:
    return ExitCode.CASES_FAILED if any(r.outcome in FAILING for r in report.results) else ExitCode.OK


def run(options: RunOptions, *, on_plan: Callable[[RunPlan], None] | None = None,
        on_event: EventSink | None = None) -> tuple[Report, dict[str, Path]]:
    started = utc_now()
    options.out_dir.mkdir(parents=True, exist_ok=True)
    env, hardware = envmod.collect_environment()
    run_plan = make_plan(options)
    if on_plan is not None:
        on_plan(run_plan)
    run_dir = None
    results: list[CaseResult] = []
    if run_plan.groups or run_plan.skips:
        run_dir = options.out_dir / f"run-{hardware['host']}-{started.strftime('%Y%m%dT%H%M%SZ')}-{os.getpid()}"
        run_dir.mkdir(parents=True)
        recover.write_manifest(
            run_dir, started=iso(started), level=options.level, argv=options.argv, env=scrub(env),
            hardware=scrub(hardware),
            planned=[recover.case_entry(c, g.device_kind) for g in run_plan.groups for c in g.cases],
            skips=[{**recover.case_entry(s.case, s.device_kind), "reason": s.reason} for s in run_plan.skips],
            keyword=options.keyword)
        results = execute(run_plan, run_dir, env["packages"], options, on_event or (lambda _k, _p: None))
    results = selected_health(hardware, options.keyword) + results
    report = build_report(started=started, finished=utc_now(), level=options.level, argv=options.argv,
                          env=env, hardware=hardware, results=results, run_dir=run_dir, anonymize=options.anonymize)
    return report, write_reports(report, options.out_dir, started)

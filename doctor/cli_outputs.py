"""The files the CLI writes beside its reports (JUnit XML, Prometheus metrics, a diff) and what it says about
where files went: every output a user names goes through `ds_doctor.files.write_output`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from ds_doctor.reports.records import Report


def write_extra_formats(
    report: Report,
    junit_file: Path | None,
    prom_file: Path | None,
    baseline: Report | None = None,
    tolerance_pct: float = 10.0,
) -> dict[str, Path]:
    """JUnit XML and Prometheus metrics (with `run --baseline`, each measure's ratio to the baseline's), from the
    already scrubbed report: a file replaced atomically, a stream (`/dev/null`, a FIFO's reader) written in place."""
    from ds_doctor.reports.junit import render_junit
    from ds_doctor.reports.prometheus import render_prometheus

    written = {}
    if junit_file is not None:
        write_user_output(junit_file, render_junit(report), "--junit")
        written["junit"] = junit_file
    if prom_file is not None:
        write_user_output(prom_file, render_prometheus(report, baseline, tolerance_pct), "--prometheus")
        written["prometheus"] = prom_file
    return written


def write_user_output(path: Path, text: str, option: str) -> None:
    """An output the user named (checked before the run; a FIFO whose reader left since is one line)."""
    from ds_doctor.files import OutputError, write_output

    try:
        write_output(path, text)
    except OutputError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def show_paths(console: Any, paths: dict[str, Path]) -> None:
    """Where the files went, scrubbed like the report (a directory name can look like a token)."""
    from ds_doctor.redact import scrub_text
    from ds_doctor.reports.console import print_paths

    print_paths(console, {key: scrub_text(str(path)) for key, path in paths.items()})


def report_what_finished(out_dir: Path, anonymized: bool) -> dict[str, Path]:
    """On SIGINT or SIGTERM (a CI job's time limit, `timeout`): the run directory of this process (its name ends in
    our pid) holds every case that finished; its report is written as `ds-doctor report DIR` would write it, cases
    that never finished marked so, and where the files went is said. Where it cannot be written, how to write it."""
    from ds_doctor.redact import scrub_text
    from ds_doctor.run.build import write_reports
    from ds_doctor.run.recover import InputError, report_from_run_dir

    paths: dict[str, Path] = {}
    for run_dir in sorted(out_dir.glob(f"run-*-{os.getpid()}")):
        try:
            built, _ = report_from_run_dir(run_dir, anonymized=anonymized)
            paths.update(write_reports(built, out_dir, suffix="-interrupted"))
        except (InputError, OSError, ValueError) as exc:
            click.echo(
                f"ds-doctor: the cases that finished are in {scrub_text(str(run_dir))} ({scrub_text(str(exc))}); "
                f"render them with: ds-doctor report {scrub_text(str(run_dir))}",
                err=True,
            )
    for key, path in paths.items():
        click.echo(
            f"ds-doctor: stopped; the {key} report of the cases that finished: {scrub_text(str(path))}",
            err=True,
        )
    return paths

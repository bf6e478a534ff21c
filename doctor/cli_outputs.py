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


def say_where_the_run_is(out_dir: Path) -> None:
    """On SIGINT: the run directory of this process (its name ends in our pid) holds every case that finished, and
    `report` renders it."""
    from ds_doctor.redact import scrub_text

    for run_dir in sorted(out_dir.glob(f"run-*-{os.getpid()}")):
        click.echo(
            f"ds-doctor: the cases that finished are in {scrub_text(str(run_dir))}; "
            f"render them with: ds-doctor report {scrub_text(str(run_dir))}",
            err=True,
        )

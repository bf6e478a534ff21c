"""The files the CLI writes beside its reports (JUnit XML, Prometheus metrics, a diff) and what it says about
where files went: every output a user names goes through `ds_doctor.files.write_output`."""

from __future__ import annotations

import contextlib
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
    table_dir: Path | None = None,
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
    if table_dir is not None:
        from ds_doctor.run.build import report_basename
        from ds_doctor.table.parquet import TableError, write_table

        try:
            files = write_table(report, table_dir, report_basename(report))
        except TableError as exc:
            raise click.BadParameter(str(exc), param_hint="--table") from None
        written.update({"table" if i == 0 else f"table ({i + 1})": path for i, path in enumerate(files)})
    return written


def check_table_dir(path: Path | None) -> Path | None:
    """`--table`: pyarrow importable and the folder writable, before anything runs (each a line, exit 2)."""
    if path is None:
        return None
    from ds_doctor.options import writable_dir
    from ds_doctor.table.parquet import TableError, require_pyarrow

    try:
        require_pyarrow()
    except TableError as exc:
        raise click.BadParameter(str(exc), param_hint="--table") from None
    return writable_dir(path, "--table")


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


def report_what_finished(
    out_dir: Path,
    anonymized: bool,
    signal: str = "SIGINT",
    extras: tuple[Path | None, Path | None] = (None, None),
) -> dict[str, Path]:
    """On SIGINT, SIGTERM or SIGHUP (Ctrl-C, a CI job's time limit, `timeout`, a closed terminal): the run directory of
    this process (its name ends in our pid) holds every case that finished; its logs are scrubbed (a launch stopped
    mid-way never got to), the signal is recorded there, and its report is written as `ds-doctor report DIR` would
    write it, the unfinished cases `not run` and the report saying the run stopped, with the `--junit` and
    `--prometheus` files (`extras`) asked for. Then one line: how far the run got and where its report is (or, where
    it cannot be written, how to write it)."""
    from ds_doctor.redact import scrub_text
    from ds_doctor.reports.safe import one_line
    from ds_doctor.rundir import RunDir

    paths: dict[str, Path] = {}
    said = []
    for run_dir in sorted(out_dir.glob(f"run-*-{os.getpid()}")):
        line, written = _report_stopped_run(RunDir(run_dir), out_dir, anonymized, signal, extras)
        said.append(line)
        paths.update(written)
    line = " · ".join(said) or f"stopped by {signal} before any case ran; no report written"
    with contextlib.suppress(OSError):  # a terminal that hung up (SIGHUP) takes no more output
        click.echo(f"ds-doctor: {one_line(scrub_text(line))}", err=True)
    return paths


def _report_stopped_run(
    run_dir: Any, out_dir: Path, anonymized: bool, signal: str, extras: tuple[Path | None, Path | None]
) -> tuple[str, dict[str, Path]]:
    """The report of one stopped run's directory, and what to say of it."""
    from ds_doctor.run.build import write_reports
    from ds_doctor.run.recover import InputError, report_from_run_dir

    try:
        run_dir.scrub_logs()
        run_dir.write_stop(signal)
        built, _ = report_from_run_dir(run_dir.path, anonymized=anonymized, stopped_by=signal)
        paths = write_reports(built, out_dir, suffix="-interrupted")
    except (InputError, OSError, ValueError) as exc:
        return (
            f"stopped by {signal}; the cases that finished are in {run_dir.path} ({exc}); "
            f"render them with: ds-doctor report {run_dir.path}"
        ), {}
    head = built.stopped.headline if built.stopped else f"Stopped by {signal}"
    line = f"{head[0].lower()}{head[1:]}; its report: {paths['markdown']} (JSON and HTML beside it)"
    try:
        paths.update(write_extra_formats(built, *extras))
    except click.BadParameter as exc:  # a FIFO whose reader left: said on the same line
        line += f"; {exc.format_message()}"
    return line, paths

"""The files the CLI writes beside its reports (each extra format of `ds_doctor.formats`, a diff) and what it says
about where files went: every output a user names goes through `ds_doctor.files.write_output`.

The extra formats' options, their checks before anything runs and their writing after the run all come from the
format registry (`ds_doctor.formats.formats()`), read when `run` or `report` parses its command line or shows its
help (`WithFormats`): a format is added by its own module, never here or in `ds_doctor.cli`."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ds_doctor.formats import FormatError, OutputFormat, Target, WriteContext, formats
from ds_doctor.reports.model import Report

if TYPE_CHECKING:
    from rich.console import Console

    from ds_doctor.rundir import RunDir

#: The option the formats' options follow in a command's options and its help (`ds_doctor.cli_options.ANONYMIZE`).
FORMATS_AFTER = "anonymize"


@functools.cache
def format_option(output: OutputFormat) -> click.Option:
    """A format's option, made once (click matches the options it parsed to those it processes by identity)."""
    return click.Option([*output.options, output.dest], type=click.Path(path_type=Path), help=output.help)


class WithFormats(click.Command):
    """A command that offers every registered format's option, after `--anonymize`."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        at = next((i + 1 for i, p in enumerate(params) if p.name == FORMATS_AFTER), len(params))
        return [*params[:at], *(format_option(output) for output in formats()), *params[at:]]


@dataclasses.dataclass(frozen=True)
class Outputs:
    """The extra formats a command line asked for, each with the path its option named, in the registry's order."""

    asked: tuple[tuple[OutputFormat, Path], ...] = ()

    @classmethod
    def take(cls, given: dict[str, object]) -> Outputs:
        """The formats' options, taken out of click's keyword arguments (what is left is the command's own)."""
        values = [(output, given.pop(output.dest, None)) for output in formats()]
        return cls(tuple((output, Path(str(path))) for output, path in values if path is not None))

    def files(self) -> dict[str, Path]:
        """The outputs that are files, by option: no input's path, and none another's."""
        return {output.option: path for output, path in self.asked if output.target is Target.FILE}


def check_outputs(
    outputs: Outputs, inputs: Mapping[str, Path | str | None], evidence: Path | None = None
) -> None:
    """Each format asked for, before anything runs (each refusal one line, exit 2): what it needs installed, then
    where it goes (a file writable, a folder made); no file is an input or another output; and none goes inside
    `evidence`, the run directory a report is rebuilt from."""
    from ds_doctor.options import check_distinct, check_writable_file, writable_dir

    for output, path in outputs.asked:
        try:
            output.requires()
        except FormatError as exc:
            raise click.BadParameter(str(exc), param_hint=output.option) from None
        if output.target is Target.FILE:
            check_writable_file(path, output.option)
        else:
            writable_dir(path, output.option)
    check_distinct(outputs.files(), inputs)
    if evidence is not None:
        _outside(outputs, evidence)


def _outside(outputs: Outputs, evidence: Path) -> None:
    """No file output inside the run directory a report is rebuilt from: it is the evidence."""
    for option, path in outputs.files().items():
        if Path(os.path.realpath(path)).is_relative_to(evidence.resolve()):
            raise click.BadParameter(
                f"{path} is inside the run directory {evidence}, which is the evidence", param_hint=option
            )


def write_extra_formats(
    report: Report, outputs: Outputs, context: WriteContext | None = None, *, stopped: bool = False
) -> dict[str, Path]:
    """Each format asked for, from the already scrubbed report (`context`: with `run --baseline`, Prometheus's
    ratios to it); of a run a signal `stopped`, those written for such a run. The paths written, by format (a
    format that writes several files: `table`, `table (2)`, ...)."""
    written = {}
    for output, path in outputs.asked:
        if stopped and not output.stopped_runs:
            continue
        try:
            paths = output.write(report, path, context or WriteContext())
        except FormatError as exc:
            raise click.BadParameter(str(exc), param_hint=output.option) from None
        written.update(
            {output.name if i == 0 else f"{output.name} ({i + 1})": p for i, p in enumerate(paths)}
        )
    return written


def write_user_output(path: Path, text: str, option: str) -> None:
    """An output the user named (checked before the run; a FIFO whose reader left since is one line)."""
    from ds_doctor.files import OutputError, write_output

    try:
        write_output(path, text)
    except OutputError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def show_paths(console: Console, paths: dict[str, Path]) -> None:
    """Where the files went, scrubbed like the report (a directory name can look like a token)."""
    from ds_doctor.redact import scrub_text
    from ds_doctor.reports.console import print_paths

    labels = [(output.name, output.label) for output in formats() if output.label is not None]
    print_paths(console, {key: scrub_text(str(path)) for key, path in paths.items()}, labels)


def report_what_finished(
    out_dir: Path, anonymized: bool, signal: str = "SIGINT", outputs: Outputs | None = None
) -> dict[str, Path]:
    """On SIGINT, SIGTERM or SIGHUP (Ctrl-C, a CI job's time limit, `timeout`, a closed terminal): the run directory of
    this process (its name ends in our pid) holds every case that finished; its logs are scrubbed (a launch stopped
    mid-way never got to), the signal is recorded there, and its report is written as `ds-doctor report DIR` would
    write it, the unfinished cases `not run` and the report saying the run stopped, with the extra formats asked for
    (`outputs`) that such a run writes. Then one line: how far the run got and where its report is (or, where
    it cannot be written, how to write it)."""
    from ds_doctor.redact import scrub_text
    from ds_doctor.reports.safe import one_line
    from ds_doctor.rundir import RunDir

    paths: dict[str, Path] = {}
    said = []
    for run_dir in sorted(out_dir.glob(f"run-*-{os.getpid()}")):
        line, written = _report_stopped_run(
            RunDir(run_dir), out_dir, anonymized, signal, outputs or Outputs()
        )
        said.append(line)
        paths.update(written)
    line = " · ".join(said) or f"stopped by {signal} before any case ran; no report written"
    with contextlib.suppress(OSError):  # a terminal that hung up (SIGHUP) takes no more output
        click.echo(f"ds-doctor: {one_line(scrub_text(line))}", err=True)
    return paths


def _report_stopped_run(
    run_dir: RunDir, out_dir: Path, anonymized: bool, signal: str, outputs: Outputs
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
        paths.update(write_extra_formats(built, outputs, stopped=True))
    except click.BadParameter as exc:  # a FIFO whose reader left: said on the same line
        line += f"; {exc.format_message()}"
    return line, paths

"""`ds-doctor`: run, list, env, triage, report, diff, fleet. The CLI parses options, calls the engine and prints.

Usage errors are one line on stderr and exit code 2; a failure of the doctor itself is one line and exit
code 3 (the traceback only with --debug). The arguments and --debug travel in click's context object.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import traceback
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

import ds_doctor
from ds_doctor import cli_options as opts
from ds_doctor.cli_bisect import bisect
from ds_doctor.cli_fleet import fleet
from ds_doctor.cli_options import Given, Into, RunCommand, run_options
from ds_doctor.cli_outputs import (
    Outputs,
    WithFormats,
    check_outputs,
    report_what_finished,
    show_paths,
    write_extra_formats,
    write_user_output,
)
from ds_doctor.cli_triage import triage
from ds_doctor.files import CannotWrite, disk_failure
from ds_doctor.formats import WriteContext
from ds_doctor.options import (
    TOLERANCE,
    check_distinct,
    check_nproc,
    check_selection,
    check_writable_file,
    checked_user_setup,
    cluster_from,
    load_report,
    output_in,
    writable_dir,
)
from ds_doctor.redact import printable
from ds_doctor.reports.model import ExitCode, Report, finite_json

if TYPE_CHECKING:  # the engine is imported where a command runs it: `--help` and `env` stay fast
    from rich.console import Console

    from ds_doctor.cluster.nodes import Cluster
    from ds_doctor.releases.overlay import Overlay
    from ds_doctor.run.pipeline import RunOptions, RunReporter


@dataclasses.dataclass
class CliState:
    """What every command may need from the invocation: the arguments as given (recorded in the report), --debug."""

    argv: list[str]
    debug: bool = False


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(ds_doctor.__version__, prog_name="ds-doctor")
@click.option("--debug", is_flag=True, help="Show tracebacks of the doctor's own errors.")
@click.pass_obj
def cli(state: CliState, debug: bool) -> None:
    """Runtime diagnostics for distributed PyTorch training (DeepSpeed, Accelerate, FSDP).

    Brings up tiny real models on this node's GPUs (or CPU), records where every parameter,
    gradient, partition and optimizer-state tensor lives, and checks it against invariants.
    """
    state.debug = state.debug or debug


def run_pipeline(options: RunOptions, progress: RunReporter) -> tuple[Report, dict[str, Path]]:
    """On one node the pipeline; across nodes the same between two exchanges (a disagreement is a usage error)."""
    from ds_doctor.run import multinode, pipeline

    if options.cluster is None:
        return pipeline.run(options, progress)
    from ds_doctor.cluster.exchange import job_secret
    from ds_doctor.cluster.nodes import ClusterError

    try:
        job_secret()  # a secret file others can read stops the run before anything is exchanged
        return multinode.run(options, progress)
    # the nodes' setup, not ds-doctor, is at fault
    except (multinode.ClusterMismatch, multinode.ExchangeError, ClusterError) as exc:
        raise click.UsageError(str(exc)) from None


def diff_against(
    baseline: Report, report: Report, tolerance_pct: float, json_path: Path
) -> tuple[str, Path, bool]:
    """`run --baseline`: the diff as Markdown, written beside the report; whether anything regressed."""
    from ds_doctor.checks.baseline import diff_reports
    from ds_doctor.files import write_atomic
    from ds_doctor.reports.diff import render_diff

    # beside the report: a file of ds-doctor's own naming
    diff = diff_reports(baseline, report, tolerance_pct)
    text, path = render_diff(diff), json_path.with_suffix(".diff.md")
    write_atomic(path, text)
    return text, path, bool(diff.regressions)


@cli.command(cls=RunCommand)
@click.pass_obj
def run(state: CliState, **parsed: object) -> int:
    """Run the probes that fit this node (or, with --nnodes, the nodes of a job) and write the report (and, with
    --baseline, the diff)."""
    from ds_doctor.procs import reaping
    from ds_doctor.rundir import owner_writes_only

    outputs = Outputs.take(
        parsed
    )  # the extra formats'; the rest are the definitions' (`ds_doctor.cli_options`)
    given = Given(parsed, run_options())
    # nothing the run makes (--out and the folders above it included) is writable by others, whatever the umask
    owner_writes_only()
    # every output is checked before anything runs or is created
    inputs = (opts.BASELINE, opts.DEEPSPEED_CONFIG, opts.ACCELERATE_CONFIG)
    check_outputs(outputs, {option.spelling: given[option] for option in inputs})
    # user code (the --model check, factories on the ranks) may leave processes: none outlives the run
    with reaping():
        options, baseline = resolve_options(state, given)
        console, (report, paths) = run_with_progress(options, given[opts.JSON], outputs)
        tolerance_pct = given[opts.TOLERANCE]
        paths.update(write_extra_formats(report, outputs, WriteContext(baseline, tolerance_pct)))
        regressed, diff_text = False, None
        if baseline is not None:
            diff_text, paths["diff"], regressed = diff_against(baseline, report, tolerance_pct, paths["json"])
        show_run(console, report, paths, diff_text, options.cluster)
        if given[opts.JSON]:
            click.echo(report.to_json())
        return max(int(report.exit_code), int(ExitCode.CASES_FAILED) if regressed else 0)


def resolve_options(state: CliState, given: Given) -> tuple[RunOptions, Report | None]:
    """Every option checked (each refusal one line, exit 2) and turned into the one value the run reads: the
    pipeline's options (the definitions marked `Into.RUN`, and what the rest resolve to), which hold the ranks'
    (`RankOptions`: those marked `Into.RANKS`); and the baseline. Nothing is put into this process's environment."""
    from ds_doctor.ops.phase import bound_from
    from ds_doctor.probe import registry
    from ds_doctor.probe.rankoptions import RankOptions
    from ds_doctor.run import pipeline
    from ds_doctor.run.groups import launches_mode
    from ds_doctor.run.plan import shared_gpu_mode

    registry.load_modules()  # a probe the environment names that does not load: one line (PluginError), first
    cluster = cluster_from(
        given[opts.NNODES],
        given[opts.NODE_RANK],
        given[opts.RDZV_ENDPOINT],
        given[opts.RDZV_ID],
        given[opts.JOIN_TIMEOUT],
    )
    rank = dataclasses.replace(
        checked_user_setup(RankOptions.of(given.into(Into.RANKS)), given[opts.TIMEOUT]),
        shared_gpu=shared_gpu_mode(os.environ),
        node_rank=cluster.node_rank if cluster else None,
        nnodes=cluster.nnodes if cluster else None,
    )
    # after the user's setup: it adds cases
    check_selection(given[opts.LEVEL], given[opts.KEYWORD], given[opts.NPROC], cluster, rank)
    baseline_file = given[opts.BASELINE]
    baseline = load_report(baseline_file, "--baseline") if baseline_file is not None else None
    check_nproc(given[opts.NPROC], given[opts.LEVEL])
    overlays = build_overlays(given[opts.WITH], given[opts.FIND_LINKS], cluster, given[opts.IGNORE_PINS])
    try:
        launches = launches_mode(os.environ)
        bound_from(os.environ)  # the op build's bound: a typo is one line before anything runs
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    out_dir = writable_dir(given[opts.OUT])  # last: a refused option leaves no empty folder behind
    resolved = pipeline.RunOptions(
        out_dir=out_dir,
        argv=tuple(state.argv),
        cluster=cluster,
        overlays=overlays,
        rank=rank,
        launches=launches,
    )
    return resolved.with_given(given.into(Into.RUN)), baseline


def build_overlays(
    with_releases: tuple[str, ...],
    find_links: Path | None,
    cluster: Cluster | None,
    ignore_pins: bool = False,
) -> tuple[Overlay, ...]:
    """`--with`: the overlay, built (or found in the cache) before anything runs; each refusal one line, exit 2."""
    if not with_releases:
        if find_links is not None or ignore_pins:
            raise click.UsageError(
                f"{'--find-links' if find_links is not None else '--ignore-pins'} is for --with: "
                "it says how the named releases are installed"
            )
        return ()
    from ds_doctor.releases.overlay import build, parse_releases
    from ds_doctor.releases.pins import build_ignoring_pins

    if cluster is not None:
        raise click.UsageError(
            "--with runs on one node: every node would need the same overlay (run it per node)"
        )
    releases = parse_releases(with_releases)
    return (
        (build_ignoring_pins if ignore_pins else build)(
            releases, find_links, say=lambda line: click.echo(printable(line), err=True)
        ),
    )


class Stopped(click.exceptions.Abort):
    """The run was stopped by a signal and has said so (`report_what_finished`'s one line): the shell's exit code
    for it, 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.exit_code = 128 + signum


#: The signals that stop a run the way Ctrl-C does: SIGTERM (`timeout`, a CI job's limit, a scheduler) and SIGHUP
#: (the terminal closed, an ssh session lost); each leaves the report of what finished
STOPPING = ("SIGTERM", "SIGHUP")


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(
        signum
    )  # the run's clean-up is SIGINT's: launches stopped, then what finished reported


def run_with_progress(
    options: RunOptions, json_stdout: bool, outputs: Outputs | None = None
) -> tuple[Console, tuple[Report, dict[str, Path]]]:
    """The run under its live progress; on SIGINT, SIGTERM or SIGHUP, the report of the cases that finished (with the
    extra formats asked for, `outputs`)."""
    import signal

    from ds_doctor.reports.console import RunProgress, make_console

    console = make_console(stderr=json_stdout)
    progress = RunProgress(console, ds_doctor.__version__, options.level)
    stopping = [signal.Signals[name] for name in STOPPING]
    previous = {signum: signal.signal(signum, _terminated) for signum in stopping}
    try:
        return console, run_pipeline(options, progress)
    except KeyboardInterrupt as exc:
        for signum in stopping:  # a second one (a supervisor's, the terminal's) lets the report finish
            signal.signal(signum, signal.SIG_IGN)
        signum = signal.Signals(int(exc.args[0]) if exc.args else signal.SIGINT)
        with contextlib.suppress(OSError):  # a terminal that hung up takes no more output
            progress.close()
        report_what_finished(options.out_dir, options.anonymized, signum.name, outputs)
        raise Stopped(signum) from None
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        with contextlib.suppress(OSError):
            progress.close()


def show_run(
    console: Console, report: Report, paths: dict[str, Path], diff_text: str | None, cluster: Cluster | None
) -> None:
    """The closing summary, the baseline's diff, where the files went (or, on a node that writes none, which does)."""
    from ds_doctor.reports.console import print_summary

    print_summary(report, console)
    if report.stacks:
        from ds_doctor.reports.sides import changes

        for change in changes(report) or ():
            console.print(printable(change.line()), markup=False, highlight=False, soft_wrap=True)
    if diff_text is not None:
        console.print(diff_text, markup=False, highlight=False, soft_wrap=True)
    show_paths(console, paths)
    if cluster is not None and not paths:
        from ds_doctor.run.multinode import report_writer

        writer = report_writer(report)
        console.print(
            f"node {cluster.node_rank}: the report is written on node {writer} ({printable(report.host_of(writer))})",
            markup=False,
        )


#: The exit code of a run stopped with Ctrl-C, as a shell reports a process SIGINT ended (128 + 2)
INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    state = CliState(
        argv=list(sys.argv[1:] if argv is None else argv), debug=bool(os.environ.get("DS_DOCTOR_DEBUG"))
    )
    if any("\x00" in arg for arg in state.argv):  # no path or value holds one (argv from a shell never can)
        click.echo("ds-doctor: error: an argument holds a NUL byte", err=True)
        return int(ExitCode.USAGE_ERROR)
    try:
        result = cli.main(args=argv, prog_name="ds-doctor", standalone_mode=False, obj=state)
    except click.exceptions.Exit as exc:  # --help, --version
        return int(exc.exit_code)
    except click.UsageError as exc:  # one line, scrubbed: a bad option may carry a token the user pasted
        click.echo(f"ds-doctor: error: {printable(exc.format_message())}", err=True)
        return int(ExitCode.USAGE_ERROR)
    # Ctrl-C (click turns SIGINT into Abort), or a run stopped by a signal
    except click.exceptions.Abort as exc:
        return _aborted(exc)
    except CannotWrite as exc:
        click.echo(f"ds-doctor: error: {printable(exc)}", err=True)
        return int(ExitCode.USAGE_ERROR)
    except OSError as exc:
        # a full or failing disk is the machine's, not ds-doctor's
        if (line := disk_failure(exc)) is not None:
            click.echo(f"ds-doctor: error: {printable(line)}", err=True)
            return int(ExitCode.USAGE_ERROR)
        if not _names_an_argument(exc, state.argv):
            return _internal_error(exc, state.debug)
        click.echo(f"ds-doctor: error: {printable(f'{exc.filename}: {exc.strerror or exc}')}", err=True)
        return int(ExitCode.USAGE_ERROR)
    except Exception as exc:
        return _uncaught(exc, state.debug)
    return int(result or 0)


def _uncaught(exc: Exception, debug: bool) -> int:
    """A probe the user's environment names (DS_DOCTOR_EXTRA_PROBES, an installed plugin) that does not load is
    theirs: one line, exit 2. Anything else is the doctor's own bug."""
    from ds_doctor.probe.registry import PluginError

    if isinstance(exc, PluginError):
        click.echo(f"ds-doctor: error: {printable(str(exc).splitlines()[0])}", err=True)
        return int(ExitCode.USAGE_ERROR)
    return _internal_error(exc, debug)


def _aborted(exc: click.exceptions.Abort) -> int:
    """The shell's convention, 128 + the signal. A run stopped by one has said so in one line (`Stopped`); anything
    else Ctrl-C stopped says it here."""
    if isinstance(exc, Stopped):
        return exc.exit_code
    click.echo("ds-doctor: aborted", err=True)
    return INTERRUPTED


def _names_an_argument(exc: OSError, argv: list[str]) -> bool:
    """An OS error about a path the user typed (too long a name, a loop of links, no permission) is their input's,
    not ds-doctor's: exit 2."""
    name = str(exc.filename) if exc.filename is not None else ""
    return bool(name) and any(name == arg or name in arg.split("=", 1) for arg in argv)


def _internal_error(exc: Exception, debug: bool) -> int:
    """The doctor's own bug: one line, exit 3, the traceback with --debug."""
    if debug:
        traceback.print_exc()
    message = str(exc).splitlines()[0] if str(exc) else ""
    click.echo(
        f"ds-doctor: internal error: {type(exc).__name__}: {printable(message)} (rerun with --debug)",
        err=True,
    )
    return int(ExitCode.INTERNAL_ERROR)


@cli.command(name="diff")
@click.argument("baseline_file", metavar="BASELINE", type=click.Path(path_type=Path))
@click.argument("new_file", metavar="NEW", type=click.Path(path_type=Path))
@click.option(
    "--tolerance",
    "tolerance_pct",
    type=TOLERANCE,
    default=10.0,
    show_default=True,
    help="Percent a bandwidth or TFLOP/s may drop before it is a regression.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option(
    "--out",
    "out_file",
    type=click.Path(path_type=Path),
    help="Also write the diff (Markdown) to this file, or into this folder as <NEW>.diff.md.",
)
def diff_command(
    baseline_file: Path, new_file: Path, tolerance_pct: float, as_json: bool, out_file: Path | None
) -> int:
    """Compare two reports of a node: outcome changes, new findings, version and hardware changes,
    bandwidth and TFLOP/s drops beyond --tolerance.

    Exit code 0 when nothing regressed, 1 on a regression.
    """
    from ds_doctor.checks.baseline import diff_reports
    from ds_doctor.reports.diff import render_diff

    out_file = output_in(out_file, f"{new_file.stem}.diff.md")
    check_writable_file(out_file, "--out")
    check_distinct({"--out": out_file}, {"BASELINE": baseline_file, "NEW": new_file})
    base, new = load_report(baseline_file, "BASELINE"), load_report(new_file, "NEW")
    diff = diff_reports(base, new, tolerance_pct)
    text = render_diff(diff)
    if out_file is not None:
        write_user_output(out_file, text, "--out")
    click.echo(json.dumps(finite_json(diff.to_dict()), indent=2, allow_nan=False) if as_json else text)
    return int(ExitCode.CASES_FAILED) if diff.regressions else 0


@cli.command(name="list")
@click.option(
    "--level", type=click.IntRange(1, 3), default=3, show_default=True, help="Show cases up to this level."
)
@click.option("-k", "keyword", metavar="EXPR", help="Filter cases by name, as pytest -k.")
def list_cases(level: int, keyword: str | None) -> int:
    """List probe families and their cases: scenario, level, world size, requirements."""
    from ds_doctor.probe import registry
    from ds_doctor.reports.console import CaseRow, FamilyRow, make_console, print_list
    from ds_doctor.run.plan import detect_hardware, missing_requirements, node_world_size, select_cases

    check_selection(3, keyword)
    cases = select_cases(registry.all_cases(node_world_size(detect_hardware())), level=level, keyword=keyword)
    families = [
        FamilyRow(
            spec.name,
            spec.scenario,
            spec.timeout_s,
            tuple(r.module for r in spec.requires),
            tuple(missing_requirements(spec)),
            spec.description,
        )
        for spec in registry.specs()
    ]
    print_list([CaseRow(c.id, c.scenario, c.level, c.world_size) for c in cases], families, make_console())
    return 0


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print it as JSON.")
@click.option(
    "--full",
    is_flag=True,
    help="Also ask an imported torch and DeepSpeed (in a child process, seconds): each op's compatibility, "
    "DeepSpeed's accelerator, torch's CUDA, cuDNN and NCCL as loaded.",
)
def env(as_json: bool, full: bool) -> int:
    """The environment and hardware, the system, DeepSpeed's ops and Accelerate's default config (docs/env.md).
    Fast: this process imports neither torch nor deepspeed; `--full` asks them in a child process."""
    from ds_doctor.hardware import runtime
    from ds_doctor.hardware.env import collect_details, collect_environment
    from ds_doctor.redact import scrub
    from ds_doctor.reports.console import environment_lines
    from ds_doctor.reports.envreport import details_lines

    child = runtime.start() if full else None  # first: it imports torch while the rest is gathered
    environment, hardware = collect_environment(dcgm=False)  # fast: no diagnostic
    details = collect_details(environment, hardware, child=child)
    environment, hardware, details = scrub((environment, hardware, details))
    if as_json:
        click.echo(json.dumps({"env": environment, "hardware": hardware, **details}, indent=2))
    else:
        click.echo("\n".join(environment_lines(environment, hardware) + details_lines(details)))
    return 0


@cli.command(cls=WithFormats)
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    help="Where to write the rebuilt report (default: beside PATH).",
)
@opts.JSON.decorate
@opts.ANONYMIZE.decorate  # then each extra format's (`WithFormats`)
def report(path: Path, out_dir: Path | None, json_stdout: bool, anonymize: bool, **formats: object) -> int:
    """Render a report from a run directory (also one whose run was killed) or from a report JSON.

    Cases that never finished are `not run`, and the report says the run did not finish (after how many of its
    cases); truncated result lines are skipped with a warning.
    Exit code as for `run`: 0 nothing failed, 1 a case failed, errored or timed out (a case not run fails nothing).
    """
    from ds_doctor.reports.console import make_console, print_summary
    from ds_doctor.run.build import write_reports
    from ds_doctor.run.recover import InputError, load_report_file, report_from_run_dir

    outputs = Outputs.take(formats)
    if not path.exists():
        raise click.BadParameter(f"{path}: no such file or directory", param_hint="PATH")
    check_outputs(outputs, {"PATH": path}, evidence=path if path.is_dir() else None)
    target = writable_dir(out_dir or path.parent)
    try:
        if path.is_dir():
            built, warnings = report_from_run_dir(path, anonymized=anonymize)
        else:
            built, warnings = load_report_file(path, anonymized=anonymize), []
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint="PATH") from None
    for warning in warnings:
        click.echo(f"ds-doctor: warning: {printable(warning)}", err=True)
    paths = write_reports(built, target, suffix="-report")
    paths.update(write_extra_formats(built, outputs))
    console = make_console(stderr=json_stdout)
    print_summary(built, console)
    show_paths(console, paths)
    if json_stdout:
        click.echo(built.to_json())
    return int(built.exit_code)


cli.add_command(triage)
cli.add_command(fleet)
cli.add_command(bisect)

if __name__ == "__main__":
    sys.exit(main())

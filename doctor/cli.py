"""`ds-doctor`: run, list, env, triage, report, diff. Usage errors are one line on stderr and exit code 2; a failure of
the doctor itself is one line and exit code 3 (the traceback only with --debug)."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import click

import doctor
from doctor.outcomes import ExitCode

_DEBUG = {"on": bool(os.environ.get("DS_DOCTOR_DEBUG"))}
_ARGV: list[list[str]] = [[]]  # the arguments `main` was given, recorded in the report


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(doctor.__version__, prog_name="ds-doctor")
@click.option("--debug", is_flag=True, help="Show tracebacks of the doctor's own errors.")
def cli(debug: bool) -> None:
    """Runtime diagnostics for distributed PyTorch training (DeepSpeed, Accelerate, FSDP).

    Brings up tiny real models on this node's GPUs (or CPU), records where every parameter,
    gradient, partition and optimizer-state tensor lives, and checks it against invariants.
    """
    _DEBUG["on"] = _DEBUG["on"] or debug


def print_paths(console: Any, paths: dict[str, Path]) -> None:
    """Where the reports went (scrubbed like the report: a directory name can look like a token)."""
    from doctor.redact import scrub_text

    for key, label in (("json", "JSON report"), ("markdown", "Markdown report"), ("junit", "JUnit XML"),
                       ("prometheus", "Prometheus metrics"), ("diff", "Diff against the baseline")):
        if key in paths:
            console.print(f"{label}: {scrub_text(str(paths[key]))}", markup=False, highlight=False)


def _check_writable_file(path: Path | None, option: str) -> None:
    """An output file's directory must exist and be writable, and the path must not be a directory."""
    if path is None:
        return
    if path.is_dir():
        raise click.BadParameter(f"{path} is a directory", param_hint=option)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise click.BadParameter(f"cannot write {path}: {parent} is not a writable directory", param_hint=option)


def write_extra_formats(report: Any, junit_file: Path | None, prom_file: Path | None) -> dict[str, Path]:
    """JUnit XML and Prometheus metrics, each written atomically, from the already scrubbed report."""
    from doctor.files import write_atomic
    from reports.junit import render_junit
    from reports.prometheus import render_prometheus

    written = {}
    if junit_file is not None:
        write_atomic(junit_file, render_junit(report))
        written["junit"] = junit_file
    if prom_file is not None:
        write_atomic(prom_file, render_prometheus(report))
        written["prometheus"] = prom_file
    return written


#: --tolerance: percent, 0 <= t < 100 (100 % would accept a bandwidth of zero)
TOLERANCE = click.FloatRange(min=0, max=100, max_open=True)


def _writable_dir(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise click.BadParameter(f"{path} exists and is not a directory", param_hint="--out")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.BadParameter(f"cannot create {path}: {exc.strerror}", param_hint="--out") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise click.BadParameter(f"{path} is not writable", param_hint="--out")
    return path


def _check_selection(level: int, keyword: str | None, nproc: int | None = None) -> None:
    """A `-k` that parses and selects something: a probe case or a GPU health result of this node."""
    import probes
    from doctor.health import PROBE as HEALTH
    from doctor.plan import KeywordError, compile_keyword, detect_hardware, select_cases
    from doctor.runner import node_world_size

    if keyword is None:
        return
    try:
        matcher = compile_keyword(keyword)
    except KeywordError as exc:
        raise click.BadParameter(str(exc), param_hint="-k") from None
    hardware = detect_hardware()
    # on a GPU node the hardware families also have cases at its world size (`-k "comm and ws8"`)
    cases = probes.all_cases(node_world_size(hardware, nproc))
    health = any(matcher(f"{HEALTH}[gpu{index}]") for index in range(hardware.gpu_count))
    if not health and not select_cases(cases, level=3, keyword=keyword):
        names = ", ".join([spec.name for spec in probes.specs()] + ([HEALTH] if hardware.gpu_count else []))
        raise click.BadParameter(f"{keyword!r} selects no case; probe families: {names} (see `ds-doctor list`)",
                                 param_hint="-k")
    if level >= 2 and not health and not select_cases(cases, level=level, keyword=keyword):
        raise click.BadParameter(f"{keyword!r} selects only level-3 cases; add --level 3", param_hint="-k")


@cli.command()
@click.option("--level", type=click.IntRange(1, 3), default=2, show_default=True,
              help="1: environment and hardware only; 2: one representative case per family; 3: every case.")
@click.option("-k", "keyword", metavar="EXPR", help="Select cases by name: substrings with and/or/not, as pytest -k.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("ds-doctor-reports"),
              show_default=True, help="Directory for the JSON and Markdown reports and the run directory.")
@click.option("--json", "json_stdout", is_flag=True, help="Also print the JSON report to stdout.")
@click.option("--nproc", type=click.IntRange(min=1), help="Ranks for multi-rank cases (default: GPUs, or 2 on CPU).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True),
              help="Per-case timeout in seconds, overriding each family's own.")
@click.option("--anonymize", is_flag=True, help="Also replace host and user names, IP addresses and GPU UUIDs.")
@click.option("--junit", "junit_file", type=click.Path(path_type=Path), help="Also write JUnit XML (Jenkins, GitLab).")
@click.option("--prometheus", "prom_file", type=click.Path(path_type=Path),
              help="Also write node_exporter textfile-collector metrics.")
@click.option("--baseline", "baseline_file", type=click.Path(path_type=Path),
              help="A report of this node to diff the run against (exit 1 on a regression).")
@click.option("--tolerance", "tolerance_pct", type=TOLERANCE, default=10.0, show_default=True,
              help="With --baseline: percent a bandwidth or TFLOP/s may drop before it is a regression.")
def run(level: int, keyword: str | None, out_dir: Path, json_stdout: bool, nproc: int | None,
        timeout_s: float | None, anonymize: bool, junit_file: Path | None, prom_file: Path | None,
        baseline_file: Path | None, tolerance_pct: float) -> int:
    """Run the probes that fit this node and write the report (and, with --baseline, the diff)."""
    from rich.console import Console

    from doctor import runner
    from doctor.plan import detect_hardware
    from reports.console import LiveProgress, print_summary

    _check_selection(level, keyword, nproc)
    baseline = _load_report(baseline_file, "--baseline") if baseline_file is not None else None
    out_dir = _writable_dir(out_dir)
    _check_writable_file(junit_file, "--junit")
    _check_writable_file(prom_file, "--prometheus")
    if nproc is not None and level >= 2:
        hardware = detect_hardware()
        if hardware.device_kind == "cuda" and nproc > hardware.gpu_count:
            raise click.BadParameter(f"{nproc} ranks but only {hardware.gpu_count} GPU(s) visible", param_hint="--nproc")
    console = Console(stderr=json_stdout)
    options = runner.RunOptions(level=level, keyword=keyword, out_dir=out_dir, nproc=nproc, timeout_s=timeout_s,
                                argv=tuple(_ARGV[0]), anonymize=anonymize)
    progress: list[LiveProgress] = []

    def on_plan(run_plan: runner.RunPlan) -> None:
        total = sum(len(g.cases) for g in run_plan.groups)
        kind = run_plan.hardware.device_kind if run_plan.hardware else "-"
        console.print(f"ds-doctor {doctor.__version__}: level {level}, {total} case(s) to run on {kind}"
                      + (f" with up to {run_plan.nproc} ranks" if total else "")
                      + (f", {len(run_plan.skips)} skipped" if run_plan.skips else ""))
        if total:
            progress.append(LiveProgress(console, total).__enter__())

    def on_event(kind: str, payload: dict[str, Any]) -> None:
        if progress:
            progress[0].on_event(kind, payload)

    try:
        report, paths = runner.run(options, on_plan=on_plan, on_event=on_event)
    finally:
        if progress:
            progress[0].__exit__(None, None, None)
    paths.update(write_extra_formats(report, junit_file, prom_file))
    regressed = False
    if baseline is not None:
        from doctor.diff import diff_reports, render_diff
        from doctor.files import write_atomic

        diff = diff_reports(baseline, report, tolerance_pct)
        paths["diff"] = paths["json"].with_suffix(".diff.md")
        write_atomic(paths["diff"], render_diff(diff))
        regressed = bool(diff.regressions)
    print_summary(report, console)
    if baseline is not None:
        console.print(render_diff(diff), markup=False, highlight=False, soft_wrap=True)
    print_paths(console, paths)
    if json_stdout:
        click.echo(report.to_json())
    return max(int(runner.exit_code(report)), int(ExitCode.CASES_FAILED) if regressed else 0)


def _load_report(path: Path, hint: str) -> Any:
    """A report JSON for diffing; anything else is a usage error naming the option or argument."""
    from doctor import recover

    if path.is_dir():
        raise click.BadParameter(f"{path} is a directory; give a report JSON (ds-doctor-*.json)", param_hint=hint)
    if not path.exists():
        raise click.BadParameter(f"{path}: no such file", param_hint=hint)
    try:
        return recover.load_report_file(path)
    except recover.InputError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None


@cli.command(name="diff")
@click.argument("baseline_file", metavar="BASELINE", type=click.Path(path_type=Path))
@click.argument("new_file", metavar="NEW", type=click.Path(path_type=Path))
@click.option("--tolerance", "tolerance_pct", type=TOLERANCE, default=10.0, show_default=True,
              help="Percent a bandwidth or TFLOP/s may drop before it is a regression.")
@click.option("--json", "as_json", is_flag=True, help="Print the diff as JSON.")
@click.option("--out", "out_file", type=click.Path(path_type=Path), help="Also write the diff (Markdown) here.")
def diff_command(baseline_file: Path, new_file: Path, tolerance_pct: float, as_json: bool, out_file: Path | None) -> int:
    """Compare two reports of a node: outcome changes, new findings, version and hardware changes,
    bandwidth and TFLOP/s drops beyond --tolerance.

    Exit code 0 when nothing regressed, 1 on a regression.
    """
    from doctor.diff import diff_reports, render_diff
    from doctor.files import write_atomic

    _check_writable_file(out_file, "--out")
    base, new = _load_report(baseline_file, "BASELINE"), _load_report(new_file, "NEW")
    diff = diff_reports(base, new, tolerance_pct)
    text = render_diff(diff)
    if out_file is not None:
        write_atomic(out_file, text)
    click.echo(json.dumps(diff.to_dict(), indent=2) if as_json else text)
    return int(ExitCode.CASES_FAILED) if diff.regressions else 0


@cli.command(name="list")
@click.option("--level", type=click.IntRange(1, 3), default=3, show_default=True, help="Show cases up to this level.")
@click.option("-k", "keyword", metavar="EXPR", help="Filter cases by name, as pytest -k.")
def list_cases(level: int, keyword: str | None) -> int:
    """List probe families and their cases: scenario, level, world size, requirements."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    import probes
    from doctor.plan import detect_hardware, missing_requirements, select_cases
    from doctor.runner import node_world_size

    _check_selection(3, keyword)
    specs = {spec.name: spec for spec in probes.specs()}
    table = Table(title="ds-doctor cases")
    table.add_column("case", no_wrap=True)
    for column in ("scenario", "level", "ranks"):
        table.add_column(column)
    for case in select_cases(probes.all_cases(node_world_size(detect_hardware())), level=level, keyword=keyword):
        table.add_row(escape(case.id), case.scenario, str(case.level), str(case.world_size))
    Console().print(table)
    for spec in specs.values():
        missing = missing_requirements(spec)
        requires = ", ".join(r.module for r in spec.requires) or "nothing"
        click.echo(f"{spec.name} ({spec.scenario}, timeout {spec.timeout_s:g} s, needs {requires}"
                   + (f"; missing: {'; '.join(missing)}" if missing else "") + f"): {spec.description}")
    return 0


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the environment section as JSON.")
def env(as_json: bool) -> int:
    """The environment and hardware sections alone (fast: imports neither torch nor deepspeed)."""
    from doctor.env import collect_environment
    from doctor.redact import scrub

    environment, hardware = scrub(collect_environment())
    if as_json:
        click.echo(json.dumps({"env": environment, "hardware": hardware}, indent=2))
        return 0
    click.echo(f"host: {hardware['host']}  cpus: {hardware['cpus']}  "
               f"memory: {(hardware['memory_bytes'] or 0) / 2**30:.1f} GiB")
    for gpu in hardware["gpus"]:
        click.echo(f"gpu {gpu['index']}: {gpu.get('name')} {(gpu.get('memory_total_bytes') or 0) / 2**30:.0f} GiB "
                   f"{gpu.get('uuid')}")
    if not hardware["gpus"]:
        click.echo(f"gpus: none ({hardware['gpus_reason']})")
    click.echo(f"python: {environment['python']}  platform: {environment['platform']}")
    click.echo(f"cuda (torch build): {environment['cuda']}  nccl: {environment['nccl']}  driver: {environment['driver']} "
               f"(CUDA {environment['cuda_driver']})")
    for name, version in environment["packages"].items():
        click.echo(f"{name}: {version or 'not installed'}")
    for name, value in environment["variables"].items():
        click.echo(f"{name}={value}")
    return 0


@cli.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path),
              help="Where to write the rebuilt report (default: beside PATH).")
@click.option("--json", "json_stdout", is_flag=True, help="Also print the JSON report to stdout.")
@click.option("--anonymize", is_flag=True, help="Also replace host and user names, IP addresses and GPU UUIDs.")
@click.option("--junit", "junit_file", type=click.Path(path_type=Path), help="Also write JUnit XML (Jenkins, GitLab).")
@click.option("--prometheus", "prom_file", type=click.Path(path_type=Path),
              help="Also write node_exporter textfile-collector metrics.")
def report(path: Path, out_dir: Path | None, json_stdout: bool, anonymize: bool, junit_file: Path | None,
           prom_file: Path | None) -> int:
    """Render a report from a run directory (also one whose run was killed) or from a report JSON.

    Cases that never finished are marked; truncated result lines are skipped with a warning.
    Exit code as for `run`: 0 nothing failed, 1 a case failed, errored, timed out or never finished.
    """
    from rich.console import Console

    from doctor import recover, runner
    from doctor.redact import scrub_text
    from reports.console import print_summary

    if not path.exists():
        raise click.BadParameter(f"{path}: no such file or directory", param_hint="PATH")
    target = _writable_dir(out_dir or path.parent)
    _check_writable_file(junit_file, "--junit")
    _check_writable_file(prom_file, "--prometheus")
    try:
        if path.is_dir():
            built, warnings = recover.report_from_run_dir(path, anonymize=anonymize)
        else:
            built, warnings = recover.load_report_file(path, anonymize=anonymize), []
    except recover.InputError as exc:
        raise click.BadParameter(str(exc), param_hint="PATH") from None
    for warning in warnings:
        click.echo(f"ds-doctor: warning: {scrub_text(warning)}", err=True)
    started = runner.parse_iso(built.started_at)
    paths = runner.write_reports(built, target, started, suffix="-report")
    paths.update(write_extra_formats(built, junit_file, prom_file))
    console = Console(stderr=json_stdout)
    print_summary(built, console)
    print_paths(console, paths)
    if json_stdout:
        click.echo(built.to_json())
    return int(runner.exit_code(built))


@cli.command()
@click.argument("source", metavar="FILE|-", type=click.Path(dir_okay=False, allow_dash=True, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the matches as JSON.")
def triage(source: str, as_json: bool) -> int:
    """Match a log or traceback (a file, or - for stdin) against the known issues.

    Exit code 0 when something matched, 1 when nothing did.
    """
    from doctor.env import package_versions
    from doctor.triage import MAX_INPUT_BYTES, render
    from doctor.triage import triage as match_issues

    if source == "-":
        data = sys.stdin.buffer.read()
    else:
        path = Path(source)
        if not path.is_file():
            raise click.BadParameter(f"{source}: no such file", param_hint="FILE")
        try:
            with path.open("rb") as handle:
                size = path.stat().st_size
                handle.seek(max(0, size - MAX_INPUT_BYTES))
                data = handle.read()
        except OSError as exc:
            raise click.BadParameter(f"{source}: {exc.strerror}", param_hint="FILE") from None
    text = data[-MAX_INPUT_BYTES:].decode("utf-8", errors="replace")
    matches = match_issues(text, package_versions())
    if as_json:
        click.echo(json.dumps({"matches": [m.to_dict() for m in matches]}, indent=2))
    else:
        click.echo(render(matches))
    return 0 if matches else 1


def main(argv: list[str] | None = None) -> int:
    _ARGV[0] = list(sys.argv[1:] if argv is None else argv)
    try:
        result = cli.main(args=argv, prog_name="ds-doctor", standalone_mode=False)
    except click.exceptions.Exit as exc:  # --help, --version
        return int(exc.exit_code)
    except click.UsageError as exc:
        click.echo(f"ds-doctor: error: {exc.format_message()}", err=True)
        return int(ExitCode.USAGE_ERROR)
    except click.exceptions.Abort:
        click.echo("ds-doctor: aborted", err=True)
        return int(ExitCode.INTERNAL_ERROR)
    except Exception as exc:
        if _DEBUG["on"]:
            traceback.print_exc()
        message = str(exc).splitlines()[0] if str(exc) else ""
        click.echo(f"ds-doctor: internal error: {type(exc).__name__}: {message} (rerun with --debug)", err=True)
        return int(ExitCode.INTERNAL_ERROR)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())

"""Console output with rich: progress while cases run, the summary table, and the `list` and `env` tables.

On a terminal a live bar shows the case and stage each rank is in, and the run closes with a table. Anywhere
else (CI logs, `| tee`) each case prints one plain line as it finishes, as pytest does, nothing is cut to a
terminal's width, and the run closes with a compact summary: the counts, then one line per case that failed,
errored or timed out, its reason cut to fit `SUMMARY_WIDTH`.

Strings from a report are data, not markup: they reach rich as `Text` (no markup, no emoji codes, no
highlighting), through `ds_doctor.reports.safe.one_line` (control characters and escape sequences shown, never sent).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from ds_doctor.reports.measures import MEASURES, format_measure
from ds_doctor.reports.model import FAILING, CaseResult, Outcome, Report, Verdict
from ds_doctor.reports.safe import clip, one_line
from ds_doctor.reports.sections import EnvSection, GpuReading, HardwareSection, section

STYLES = {
    Outcome.PASS: "green",
    Outcome.FAIL: "bold red",
    Outcome.ERROR: "bold red",
    Outcome.TIMEOUT: "bold red",
    Outcome.SKIP: "yellow",
    Outcome.XFAIL: "magenta",
    Outcome.XPASS: "cyan",
    Outcome.NOT_RUN: "dim",
}
WIDE = 100_000  # a console that is not a terminal: never wrap or cut a line
QUIET_S = 30.0  # off a terminal, a run never says nothing for longer than this (`RunProgress.tick`)
SUMMARY_WIDTH = 160  # a line of the compact summary, at most (a case id is never cut)
CELL_CHARS = 300  # a table cell, at most


def cell_text(value: object, style: str = "", width: int = CELL_CHARS) -> Text:
    """Data for rich: one line, control characters shown, no markup, cut to `width` characters."""
    return Text(clip(value, width), style=style)


def say(console: Console, line: str | Text) -> None:
    """One line of text (built from `one_line`d data) as it is: no markup, no emoji codes, no highlighting."""
    console.print(line if isinstance(line, Text) else Text(line))


def make_console(*, stderr: bool = False) -> Console:
    """A console for a person: the terminal's width on a terminal, unlimited anywhere else."""
    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=WIDE, soft_wrap=True)


def key_measures(result: CaseResult) -> list[str]:
    """The headline measures of a case, `—` with the reason where one means nothing at its world size."""
    return [
        format_measure(name, value, result.world_size)
        for name, value in result.measures.items()
        if name in MEASURES and MEASURES[name].headline
    ]


def case_line(result: CaseResult) -> str:
    """One plain line for a finished case: id, outcome, time, the key measure or the reason."""
    detail = " · ".join(key_measures(result)) if result.outcome == Outcome.PASS else (result.reason or "")
    detail = f"[shared GPU: {result.shared_gpu}] {detail}".strip() if result.shared_gpu else detail
    return one_line(
        f"{result.key} {result.outcome.label.upper()} {result.duration_s:.1f}s"
        + (f" {detail}" if detail else "")
    )


class RunProgress:
    """Tells a person what a run is doing: a live bar on a terminal, a plain line per case elsewhere."""

    def __init__(self, console: Console, version: str, level: int) -> None:
        self.console, self.version, self.level = console, version, level
        self.progress: Progress | None = None
        self.task: Any = None
        self.done: set[str] = set()
        self.last_said = time.monotonic()
        self.running = ""  # the latest stage a rank entered, for `tick`

    def say(self, line: str | Text) -> None:
        say(self.console, line)
        self.last_said = time.monotonic()

    def note(self, line: str) -> None:
        self.say(one_line(line))

    def tick(self) -> None:
        """Off a terminal (a log, a CI job), a line whenever `QUIET_S` passed without one: what still runs. A terminal
        has the live bar."""
        quiet = time.monotonic() - self.last_said
        if self.progress is None and self.running and quiet >= QUIET_S:
            self.say(one_line(f"... still running: {self.running} ({quiet:.0f} s since the last line)"))

    def planned(self, total: int, device_kind: str, nproc: int, skipped: int) -> None:
        self.say(
            one_line(
                f"ds-doctor {self.version}: level {self.level}, {total} case(s) to run on "
                f"{device_kind}"
                + (f" with up to {nproc} ranks" if total else "")
                + (f", {skipped} skipped" if skipped else "")
            )
        )
        if total and self.console.is_terminal:
            columns = (
                SpinnerColumn(),
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            self.progress = Progress(*columns, console=self.console, transient=True)
            self.progress.start()
            self.task = self.progress.add_task("starting", total=total)

    def stage(self, case: str, rank: int, stage: str) -> None:
        self.running = clip(f"{case} · rank {rank} · {stage}", CELL_CHARS)
        if self.progress is not None:
            self.progress.update(self.task, description=clip(f"{case} · rank {rank} · {stage}", CELL_CHARS))

    def case_done(self, result: CaseResult) -> None:
        if result.key in self.done:
            return
        self.done.add(result.key)
        if self.progress is not None:
            self.progress.update(self.task, completed=len(self.done))
        else:
            self.say(case_line(result))

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def _details(result: CaseResult) -> str:
    details = result.reason or ""
    issue = result.known_issue
    if issue and issue.verdict in (Verdict.AFFECTED, Verdict.POSSIBLY):
        # a "possibly" says so, and a match made other than by the message says how (a cut, a frame, a banner)
        said = "possibly " if issue.verdict == Verdict.POSSIBLY else ""
        how = f", by {issue.match}" if issue.match and issue.match != "wording" else ""
        details = f"[{said}{issue.id}{how}] {details}"
    warnings = [f for f in result.findings if not f.is_error]
    if warnings and not details:
        details = f"{len(warnings)} warning(s): " + "; ".join(sorted({f.invariant for f in warnings}))
    measured = key_measures(result)
    if measured and not result.reason:
        details = " · ".join(filter(None, [", ".join(measured), details]))
    return one_line(details)


def summary_table(report: Report) -> Table:
    table = Table(title="ds-doctor", show_lines=False)
    table.add_column("case", no_wrap=True)
    if report.nodes:
        table.add_column("where", no_wrap=True)
    table.add_column("outcome", no_wrap=True)
    table.add_column("time", no_wrap=True)
    table.add_column("details", overflow="fold")
    for result in report.results:
        where = [cell_text(report.where(result))] if report.nodes else []
        table.add_row(
            cell_text(result.label),
            *where,
            Text(result.outcome.label, style=STYLES[result.outcome]),
            f"{result.duration_s:.1f}s",
            cell_text(_details(result)),
        )
    return table


def closing_line(report: Report) -> str:
    """Where the run ran (each node's host, GPUs and CPUs) and the count of each outcome."""
    counts = ", ".join(f"{v} {Outcome(k).label}" for k, v in report.summary.items() if v) or "no cases ran"
    if report.nodes:
        said = [
            f"node {n.node} {n.host}: {len(n.hardware.gpus)} GPU(s), {n.hardware.cpus} CPUs"
            for n in report.nodes
        ]
    else:
        said = [f"{report.hardware.host}: {len(report.hardware.gpus)} GPU(s), {report.hardware.cpus} CPUs"]
    return one_line(" · ".join([*said, counts]))


def compact_summary(report: Report) -> list[str]:
    """Off a terminal: the counts, then one line per case that failed the run (`case OUTCOME reason`), the
    reason cut so that the line fits `SUMMARY_WIDTH` (a case id is never cut: it is what one greps for).
    Skips, xfails and xpasses fail nothing: counted, not listed."""
    lines = [closing_line(report)]
    failed = [r for r in report.results if r.outcome in FAILING]
    if failed:
        lines.append(f"{len(failed)} case(s) failed the run:")
    for result in failed:
        where = f" ({report.where(result)})" if report.nodes else ""
        head = one_line(f"  {result.label}{where} {result.outcome.value.upper()}")
        reason = _details(result)
        lines.append(f"{head} {clip(reason, max(SUMMARY_WIDTH - len(head) - 1, 40))}" if reason else head)
    return lines


def print_summary(report: Report, console: Console) -> None:
    """The run's closing summary: a stopped run's headline first (`RunStop.headline`), then on a terminal the table
    and the counts, anywhere else `compact_summary`; then the known issues that affect this stack."""
    if report.stopped is not None:
        say(console, Text(one_line(report.stopped.headline), style="bold"))
    if console.is_terminal:
        if report.results:
            console.print(summary_table(report))
        say(console, closing_line(report))
    else:
        for line in compact_summary(report):
            say(console, line)
    for issue in report.affecting_issues:
        say(
            console,
            Text.assemble(
                ("affected by ", "bold"), (one_line(issue["id"]), "bold"), ": ", one_line(issue["remedy"])
            ),
        )
    if traps := traps_line(report):
        say(console, traps)


def traps_line(report: Report) -> str | None:
    """The reproductions run on purpose, in one line: facts about the libraries, never said of this stack."""
    reproduced, absent = report.library_trap_counts
    if not reproduced and not absent:
        return None
    return (
        f"library traps run on purpose: {reproduced} reproduced as designed, {absent} absent at these versions "
        "(facts about the libraries, not this stack)"
    )


def print_paths(console: Console, paths: Mapping[str, Any], formats: Sequence[tuple[str, str]] = ()) -> None:
    """Where the files went (the caller scrubs them like the report: a directory name can look like a token): the
    report's, the extra formats' (`formats`: key and label, as the format registry has them), the diff."""
    for key, label in (
        ("json", "JSON report"),
        ("markdown", "Markdown report"),
        ("html", "HTML report"),
        *formats,
        ("diff", "Diff against the baseline"),
    ):
        if key in paths:
            say(console, one_line(f"{label}: {paths[key]}"))


@dataclasses.dataclass(frozen=True)
class CaseRow:
    """A case as `ds-doctor list` shows it."""

    case: str
    scenario: str
    level: int
    world_size: int


@dataclasses.dataclass(frozen=True)
class FamilyRow:
    """A probe family as `ds-doctor list` shows it."""

    name: str
    scenario: str
    timeout_s: float
    requires: tuple[str, ...]
    missing: tuple[str, ...]
    description: str


def print_list(cases: Iterable[CaseRow], families: Iterable[FamilyRow], console: Console) -> None:
    """On a terminal a table; piped, one plain line per case (`case scenario level ranks`), for grep and awk."""
    if not console.is_terminal:
        for case in cases:
            say(console, one_line(f"{case.case} {case.scenario} level{case.level} ws{case.world_size}"))
        _say_families(families, console)
        return
    table = Table(title="ds-doctor cases")
    table.add_column("case", no_wrap=True)
    for column in ("scenario", "level", "ranks"):
        table.add_column(column, no_wrap=True)
    for case in cases:
        table.add_row(cell_text(case.case), cell_text(case.scenario), str(case.level), str(case.world_size))
    console.print(table)
    _say_families(families, console)


def _say_families(families: Iterable[FamilyRow], console: Console) -> None:
    for family in families:
        requires = ", ".join(family.requires) or "nothing"
        say(
            console,
            one_line(
                f"{family.name} ({family.scenario}, timeout {family.timeout_s:g} s, needs {requires}"
                + (f"; missing: {'; '.join(family.missing)}" if family.missing else "")
                + f"): {family.description}"
            ),
        )


def _known(value: object, absent: str = "unknown") -> str:
    return absent if value is None else str(value)


def _gpu_line(gpu: GpuReading) -> str:
    name = gpu.name or f"name unknown ({gpu.unavailable.get('name') or 'NVML did not say'})"
    memory = f" {gpu.memory_total_bytes / 2**30:.0f} GiB" if gpu.memory_total_bytes is not None else ""
    return f"gpu {gpu.index}: {name}{memory}{f' {gpu.uuid}' if gpu.uuid else ''}"


def _build_line(env: EnvSection) -> str:
    """torch's CUDA, the NCCL wheel and the driver, each absent one said in words."""
    said = env.build_words()
    driver = f"{env.driver} (CUDA {env.cuda_driver})" if env.cuda_driver else said["driver"]
    return f"cuda (torch build): {said['cuda']}  nccl: {said['nccl']}  driver: {driver}"


def environment_lines(
    env: EnvSection | Mapping[str, Any], hardware: HardwareSection | Mapping[str, Any]
) -> list[str]:
    """`ds-doctor env` as plain lines (each line `one_line`: a value never starts a line or sends a control); an
    absent value is said in words, never as `None`."""
    env, hardware = section(EnvSection, env), section(HardwareSection, hardware)
    memory = f"{hardware.memory_bytes / 2**30:.1f} GiB" if hardware.memory_bytes is not None else "unknown"
    lines = [f"host: {_known(hardware.host)}  cpus: {_known(hardware.cpus)}  memory: {memory}"]
    lines += [_gpu_line(gpu) for gpu in hardware.gpus]
    if not hardware.gpus:
        lines.append(f"gpus: none ({hardware.gpus_reason})" if hardware.gpus_reason else "gpus: none")
    lines.append(f"python: {_known(env.python)}  platform: {_known(env.platform)}")
    lines.append(_build_line(env))
    lines += [f"{name}: {version or 'not installed'}" for name, version in env.packages.items()]
    lines += [
        f"out of declared range: {p['package']} {p['version']} declares {p['requires']}{p['declared']}; "
        f"{p['requires']} {p['installed']} is installed"
        for p in env.version_skew
    ]
    lines += [f"{name}={value}" for name, value in env.variables.items()]
    return [one_line(line) for line in lines]

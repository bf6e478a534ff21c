"""Console output with rich: live progress while cases run, then a summary table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from doctor.outcomes import Outcome
from reports.model import Report

STYLES = {
    Outcome.PASS: "green", Outcome.FAIL: "bold red", Outcome.ERROR: "bold red", Outcome.TIMEOUT: "bold red",
    Outcome.SKIP: "yellow", Outcome.XFAIL: "magenta", Outcome.XPASS: "cyan",
}
#: Measures a probe put in its notes, shown with a passing case (as in the Prometheus textfile).
MEASURED = (("busbw_gbps", "busbw GB/s"), ("tflops", "TFLOP/s"))


class LiveProgress:
    """Shows which case and stage each launch is in; fed by the runner's events."""

    def __init__(self, console: Console, total: int) -> None:
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.progress = Progress(*columns, console=console, transient=True)
        self.task = self.progress.add_task("starting", total=total)
        self.done: set[str] = set()

    def __enter__(self) -> LiveProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def on_event(self, kind: str, payload: dict[str, Any]) -> None:
        if kind == "case_done" and payload["case"] not in self.done:
            self.done.add(payload["case"])
            self.progress.update(self.task, completed=len(self.done))
        elif kind == "stage":
            where = f"{payload['case']} · rank {payload['rank']} · {payload['stage']}"
            self.progress.update(self.task, description=escape(where))


def summary_table(report: Report) -> Table:
    table = Table(title="ds-doctor", show_lines=False)
    for column in ("case", "outcome", "time", "details"):
        table.add_column(column, overflow="fold")
    for result in report.results:
        details = result.reason or ""
        if result.known_issue and result.known_issue.get("verdict") == "affected":
            details = f"[{result.known_issue['id']}] {details}"
        warnings = [f for f in result.findings if f.severity != "error"]
        if warnings and not details:
            details = f"{len(warnings)} warning(s): " + "; ".join(sorted({f.invariant for f in warnings}))
        measured = [f"{label} {result.notes[key]:g}" for key, label in MEASURED
                    if isinstance(result.notes.get(key), (int, float))]
        if measured and not result.reason:
            details = " · ".join(filter(None, [", ".join(measured), details]))
        table.add_row(escape(result.case), f"[{STYLES[result.outcome]}]{result.outcome.value}[/]",
                      f"{result.duration_s:.1f}s", escape(details[:300]))
    return table


def print_summary(report: Report, console: Console) -> None:
    if report.results:
        console.print(summary_table(report))
    counts = ", ".join(f"{v} {k}" for k, v in report.summary.items() if v) or "no cases ran"
    gpus = report.hardware.get("gpus") or []
    console.print(f"{report.hardware.get('host')}: {len(gpus)} GPU(s), {report.hardware.get('cpus')} CPUs · {counts}")
    for issue in report.affecting_issues:
        console.print(f"[bold]affected by {escape(issue['id'])}[/]: {escape(issue['remedy'])}")

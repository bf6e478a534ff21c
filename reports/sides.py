"""A `run --with` report's stacks side by side: each case's outcome on each, and the known issues that appear or
clear between the stack as installed and an overlay (measured here: the device and the date are the run's)."""

from __future__ import annotations

import dataclasses

from ds_doctor.reports.model import CaseResult, Outcome, Report

SHOWN = (Outcome.XFAIL, Outcome.ERROR, Outcome.FAIL)  # the ways a known issue shows on a case


@dataclasses.dataclass(frozen=True)
class StackChange:
    issue: str
    case: str
    stack: str  # the overlay's name
    appears: bool  # on the overlay and not as installed (False: it clears)
    before: str  # the outcome as installed
    after: str  # the outcome on the overlay
    versions: str  # "prodigy-plus-schedule-free 2.0.1 -> 1.8.51"
    device: str
    date: str

    def line(self) -> str:
        verb = "brings" if self.appears else "clears"
        return (
            f"{self.versions} {verb} {self.issue}: {self.case} {self.before} -> {self.after} (measured here, "
            f"{self.device}, {self.date})"
        )


def ignored_pins(report: Report) -> list[str]:
    """`--ignore-pins`: each requirement an overlay's releases declare that its stack does not meet, one line each."""
    return [f"{s.name} ignores a pin: {line}" for s in report.stacks for line in s.ignored_pins]


def stack_names(report: Report) -> list[str]:
    return [s.name for s in report.stacks if s.name != "installed"]


def _shown(result: CaseResult | None) -> str | None:
    if result is None or result.known_issue is None or result.outcome not in SHOWN:
        return None
    return result.known_issue.id


def by_case(report: Report) -> dict[tuple[str, int | None], dict[str | None, CaseResult]]:
    """Each case (and node) with its result on every stack, None for the stack as installed."""
    table: dict[tuple[str, int | None], dict[str | None, CaseResult]] = {}
    for result in report.results:
        table.setdefault((result.case, result.node), {})[result.stack] = result
    return table


def _versions(report: Report, stack: str) -> str:
    installed = next((s.packages for s in report.stacks if s.name == "installed"), {})
    overlay = next((s.packages for s in report.stacks if s.name == stack), {})
    return ", ".join(
        f"{name} {installed.get(name) or 'absent'} -> {version}" for name, version in overlay.items()
    )


def changes(report: Report) -> list[StackChange]:
    """Every known issue that shows on a case on one side of an overlay and not on the other."""
    out = []
    date = str(report.started_at)[:10]
    for (case, _), results in by_case(report).items():
        base = results.get(None)
        for stack in stack_names(report):
            other = results.get(stack)
            if base is None or other is None:
                continue
            before, after = _shown(base), _shown(other)
            for issue, appears in ((after, True), (before, False)):
                if issue and issue != (before if appears else after):
                    out.append(
                        StackChange(
                            issue,
                            case,
                            stack,
                            appears,
                            base.outcome.value,
                            other.outcome.value,
                            _versions(report, stack),
                            other.device_kind,
                            date,
                        )
                    )
    return out

"""`ds-doctor fleet` output: many nodes' reports as one table, as plain data and Markdown.

The engine (`ds_doctor.fleet.facts`) fills these records from report files; this module only shows them. Every
string that came from a report (a host, a case id, a version, a reason) goes through `ds_doctor.reports.safe`, as in the
report's own Markdown: the files are other machines' output.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ds_doctor.reports.measures import MEASURES
from ds_doctor.reports.safe import clip, md_cell, md_text

#: How a fingerprint key is named in the table (`package:deepspeed` is `deepspeed`, `env:NCCL_IB_HCA` `$NCCL_IB_HCA`).
KEY_LABELS = {
    "python": "Python",
    "torch.cuda": "torch's CUDA",
    "torch.nccl": "NCCL",
    "driver": "driver",
    "cuda_driver": "CUDA driver",
    "gpu.name": "GPU",
    "gpu.memory_gib": "GPU memory (GiB)",
    "gpu.compute_capability": "compute capability",
    "gpu.count": "GPUs",
}
CELL_ITEMS = 6  # a table cell lists this many and counts the rest (the sections below list them all)
CELL_CHARS = 200  # ...each cut to this many characters (a reason, a host name may be anything)


def key_label(key: str) -> str:
    if key.startswith("package:"):
        return key.removeprefix("package:")
    if key.startswith("env:"):
        return "$" + key.removeprefix("env:")
    return KEY_LABELS.get(key, key)


@dataclasses.dataclass(frozen=True)
class Deviation:
    """A key on which a node differs from the fleet's majority (the consistency rules' own verdict)."""

    key: str
    value: str
    majority: str
    severity: str  # error: a job spanning these nodes crashes or hangs; warning: it may behave differently

    def short(self) -> str:
        return f"{key_label(self.key)} {self.value} (fleet {self.majority})"


@dataclasses.dataclass(frozen=True)
class MeasureCell:
    """One measure of one case on one node, against the median of the nodes with the same GPUs."""

    case: str
    measure: str
    gpus: str  # the group compared: the node's GPU models ("no GPU" on CPU nodes)
    value: float
    median: float
    nodes: int  # nodes in the group
    delta_pct: float | None  # against the median; None where the median is 0
    below: bool  # worse than the median by more than the tolerance

    def short(self) -> str:
        measure = MEASURES[self.measure]
        unit = f" {measure.unit}" if measure.unit else ""
        delta = f" ({self.delta_pct:+.1f}% vs {self.median:g})" if self.delta_pct is not None else ""
        return f"{self.case} {measure.label} {self.value:g}{unit}{delta}"


@dataclasses.dataclass(frozen=True)
class Drift:
    """A measure of one node that gets worse against the fleet night after night (`ds_doctor.fleet.drift`): the
    fitted change of its ratio to each night's fleet median, with its standard error."""

    host: str
    case: str
    measure: str
    gpus: str
    nights: int
    first_night: str
    last_night: str
    first_value: float
    last_value: float
    pct_per_night: float  # fitted, against the fleet: negative is lower
    error_pct: float  # one standard error of the slope, in percent a night
    change_pct: float  # fitted over the nights read

    def short(self) -> str:
        measure = MEASURES[self.measure]
        unit = f" {measure.unit}" if measure.unit else ""
        return (
            f"{self.case} {measure.label} {self.pct_per_night:+.2f}% ± {self.error_pct:.2f} a night against the "
            f"fleet over {self.nights} nights ({self.first_value:g} → {self.last_value:g}{unit})"
        )


@dataclasses.dataclass(frozen=True)
class FailedCase:
    case: str
    outcome: str
    reason: str
    rules: tuple[str, ...] = ()  # a GPU health case: the error findings' rules


@dataclasses.dataclass(frozen=True)
class NodeView:
    """One node's row: its newest report, what failed, where it differs from the fleet and falls below it."""

    host: str
    source: str
    started_at: str
    outcomes: dict[str, int]
    failing: tuple[FailedCase, ...]  # cases that failed, errored or timed out (GPU health apart)
    gpu_health: tuple[FailedCase, ...]  # gpu_health cases that failed or errored
    deviations: tuple[Deviation, ...] = ()
    measures: tuple[MeasureCell, ...] = ()
    shared_gpu: tuple[str, ...] = ()  # cases whose ranks shared a GPU: their measures are not compared
    superseded: tuple[str, ...] = ()  # older reports of this host that the newest replaced
    notes: tuple[str, ...] = ()
    drifting: tuple[Drift, ...] = ()  # with --since: its measures that get worse night after night

    @property
    def failed(self) -> bool:
        return bool(self.failing or self.gpu_health)

    @property
    def below(self) -> list[MeasureCell]:
        return [m for m in self.measures if m.below]

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "failed": self.failed}


@dataclasses.dataclass(frozen=True)
class Spread:
    """A key whose value differs across the fleet: the majority value and the hosts holding each other one."""

    key: str
    severity: str
    majority: str
    majority_nodes: int
    others: dict[str, list[str]]


@dataclasses.dataclass(frozen=True)
class Unreadable:
    source: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Fleet:
    tolerance_pct: float
    nodes: tuple[NodeView, ...]
    spreads: tuple[Spread, ...] = ()
    unreadable: tuple[Unreadable, ...] = ()
    not_read: int = 0  # older reports of a host skipped by their file names (the newest was read)
    drifts: tuple[Drift, ...] = ()
    window: str | None = None  # with --since: the nights read ("2026-10-29 to 2026-11-28, 30 nights")

    @property
    def quiet(self) -> list[NodeView]:
        """Nodes with nothing to say: no failure, no difference from the fleet, nothing below it or drifting."""
        return [n for n in self.nodes if not (n.failed or n.deviations or n.below or n.drifting)]

    @property
    def failed(self) -> bool:
        return any(node.failed for node in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tolerance_pct": self.tolerance_pct,
            "failed": self.failed,
            "nodes": [n.to_dict() for n in self.nodes],
            "spreads": [dataclasses.asdict(s) for s in self.spreads],
            "unreadable": [dataclasses.asdict(u) for u in self.unreadable],
            "not_read": self.not_read,
            "drifts": [dataclasses.asdict(d) for d in self.drifts],
            "window": self.window,
        }


def _c(value: object, width: int = CELL_CHARS) -> str:
    """Data as a table cell: on one line, cut to `width`, made safe."""
    return md_cell(clip(value, width))


def _cell(items: list[str]) -> str:
    """Up to CELL_ITEMS entries of a table cell, each made safe, and how many more there are."""
    shown = [_c(item) for item in items[:CELL_ITEMS]]
    more = len(items) - CELL_ITEMS
    return "; ".join(shown + ([f"… {more} more"] if more > 0 else [])) or "-"


def _outcomes(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {outcome.replace('_', ' ')}" for outcome, n in counts.items() if n) or "no case"


def _health(node: NodeView) -> list[str]:
    return [f"{c.case}: {', '.join(c.rules) or c.reason}" for c in node.gpu_health]


#: Up to this many nodes every node has a row; above it (a cluster) only the nodes with something to say do, and the
#: others are counted under the table (`--json` lists them all).
ALL_ROWS = 100


def _node_rows(fleet: Fleet) -> list[str]:
    drift = " drifting across nights |" if fleet.window else ""
    lines = [
        f"| node | run | outcomes | GPU health fails | differs from the fleet | below the fleet median |{drift} |",
        "|---|---|---|---|---|---|---|" + ("---|" if drift else ""),
    ]
    quiet = {id(node) for node in fleet.quiet} if len(fleet.nodes) > ALL_ROWS else set()
    for node in fleet.nodes:
        if id(node) in quiet:
            continue
        drifting = f" {_cell([d.short() for d in node.drifting])} |" if drift else ""
        lines.append(
            f"| {_c(node.host)} | {_c(node.started_at)} | {_c(_outcomes(node.outcomes))} | "
            f"{_cell(_health(node))} | {_cell([d.short() for d in node.deviations])} | "
            f"{_cell([m.short() for m in node.below])} |{drifting} {'**FAIL**' if node.failed else 'ok'} |"
        )
    if quiet:
        lines += [
            "",
            f"{len(quiet):,} more node(s) with nothing to say (all pass, as the fleet): see --json.",
        ]
    return lines


def _drift_rows(fleet: Fleet) -> list[str]:
    if fleet.window is None:
        return []
    lines = [
        "## Drifting across nights",
        "",
        f"Nights read: {fleet.window}. Each node's measure as a ratio to that night's fleet median (nodes with the "
        f"same GPUs), a line fitted to it: named where it gets worse by more than {fleet.tolerance_pct:g}% over the "
        "nights read and the slope is at least 5 standard errors from flat.",
        "",
    ]
    if not fleet.drifts:
        return [*lines, "No node's measure drifts.", ""]
    lines += [
        "| node | case | measure | GPUs | a night (± one std. error) | over the nights | first → last | nights |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for d in fleet.drifts:
        lines.append(
            f"| {_c(d.host)} | {_c(d.case)} | {MEASURES[d.measure].label} | {_c(d.gpus)} | "
            f"{d.pct_per_night:+.2f}% ± {d.error_pct:.2f} | {d.change_pct:+.1f}% | {d.first_value:g} "
            f"({d.first_night}) → {d.last_value:g} ({d.last_night}) | {d.nights} |"
        )
    return [*lines, ""]


def _failing_rows(fleet: Fleet) -> list[str]:
    rows = [(node.host, case) for node in fleet.nodes for case in (*node.gpu_health, *node.failing)]
    if not rows:
        return []
    lines = ["## Failing cases", "", "| node | case | outcome | reason |", "|---|---|---|---|"]
    lines += [
        f"| {_c(host)} | {_c(c.case)} | {c.outcome} | {_c(c.reason) if c.reason else '-'} |"
        for host, c in rows
    ]
    return [*lines, ""]


def _spread_rows(fleet: Fleet) -> list[str]:
    if not fleet.spreads:
        return []
    lines = [
        "## Differences across the fleet",
        "",
        "As `consistency` compares the ranks of a job: `error` where a job spanning these nodes crashes or hangs.",
        "",
        "| what | fleet majority | differs on | severity |",
        "|---|---|---|---|",
    ]
    for spread in fleet.spreads:
        others = "; ".join(f"{value} on {', '.join(hosts)}" for value, hosts in spread.others.items())
        lines.append(
            f"| {_c(key_label(spread.key))} | {_c(spread.majority)} ({spread.majority_nodes} "
            f"node(s)) | {_c(others, 500)} | {spread.severity} |"
        )
    return [*lines, ""]


def _median_rows(fleet: Fleet) -> list[str]:
    groups: dict[tuple[str, str, str], list[tuple[str, MeasureCell]]] = {}
    for node in fleet.nodes:
        for cell in node.measures:
            groups.setdefault((cell.case, cell.measure, cell.gpus), []).append((node.host, cell))
    if not groups:
        return []
    lines = [
        "## Measures against the fleet median",
        "",
        f"Per case and measure, among nodes with the same GPUs; below by more than {fleet.tolerance_pct:g}% is "
        "flagged.",
        "",
        "| case | measure | GPUs | nodes | median | lowest | flagged |",
        "|---|---|---|---|---|---|---|",
    ]
    for (case, name, gpus), cells in sorted(groups.items()):
        host, low = min(cells, key=lambda item: item[1].value)
        flagged = [h for h, c in cells if c.below]
        lines.append(
            f"| {_c(case)} | {MEASURES[name].label} | {_c(gpus)} | {len(cells)} | "
            f"{low.median:g} | {low.value:g} ({_c(host)}) | {_cell(flagged)} |"
        )
    return [*lines, ""]


def _other_rows(fleet: Fleet) -> list[str]:
    lines = []
    shared = [(node.host, case) for node in fleet.nodes for case in node.shared_gpu]
    if shared:
        lines += [
            "## Not compared: ranks that shared a GPU",
            "",
            "What ranks sharing one GPU measured between them crossed no interconnect.",
            "",
        ]
        lines += [
            f"- {md_text(clip(host, CELL_CHARS))}: {md_text(clip(case, CELL_CHARS))}" for host, case in shared
        ]
        lines.append("")
    if fleet.unreadable:
        lines += (
            ["## Reports left out", ""]
            + [f"- {md_text(clip(u.source, 500))}: {md_text(clip(u.reason, 500))}" for u in fleet.unreadable]
            + [""]
        )
    notes = [(node.host, note) for node in fleet.nodes for note in node.notes]
    notes += [
        (
            node.host,
            f"newest of {len(node.superseded) + 1} reports of this host; older: "
            + ", ".join(node.superseded),
        )
        for node in fleet.nodes
        if node.superseded
    ]
    if notes or fleet.not_read:
        lines += ["## Notes", ""] + [
            f"- {md_text(clip(host, CELL_CHARS))}: {md_text(clip(note, 1000))}" for host, note in notes
        ]
        if fleet.not_read:
            lines.append(
                f"- {fleet.not_read} older report(s) not read: a newer one of the same host, by file name"
            )
        lines.append("")
    return lines


def render_fleet(fleet: Fleet) -> str:
    """Markdown (also read as plain text on a console)."""
    failing = sum(node.failed for node in fleet.nodes)
    verdict = (
        f"**{failing} of {len(fleet.nodes)} node(s) failing**"
        if failing
        else f"{len(fleet.nodes)} node(s), none failing"
    )
    lines = [
        f"# ds-doctor fleet: {verdict}",
        "",
        f"- nodes: {len(fleet.nodes)} (the newest report of each host)",
        f"- measures: flagged below the fleet median by more than {fleet.tolerance_pct:g}%",
    ]
    if fleet.window is not None:
        drifting = len({d.host for d in fleet.drifts})
        lines.append(f"- drifting across nights ({fleet.window}): {drifting} node(s)")
    if fleet.unreadable:
        lines.append(
            f"- left out: {len(fleet.unreadable)} file(s) (unreadable, or not to be taken), listed below"
        )
    lines += [
        "",
        *_node_rows(fleet),
        "",
        *_failing_rows(fleet),
        *_drift_rows(fleet),
        *_spread_rows(fleet),
        *_median_rows(fleet),
        *_other_rows(fleet),
    ]
    return "\n".join(lines).rstrip("\n") + "\n"

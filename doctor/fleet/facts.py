"""The fleet's nightly view (`ds-doctor fleet`): the newest report of each node, side by side.

One rule set, two sources: the fingerprint keys `consistency` compares across the ranks of a live job (Python and
package versions, torch's CUDA, NCCL, the driver and CUDA driver, the GPU model, the allowlisted environment) are
built here from each report's environment and hardware sections and compared by the same `disagreements`, with
the same majority and severities. Each compared measure (`ds_doctor.reports.measures.MEASURES` with a `better`: busbw,
algbw, TFLOP/s) is set against the median of the nodes with the same GPU models (an older GPU generation is no
regression of the fleet); what ranks sharing one GPU measured between them is never a node's figure and is left
out. Exit 1 belongs to failing cases (GPU health included), as for `run`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics
from collections.abc import Sequence
from typing import Any

from ds_doctor.checks.consistency import disagreements
from ds_doctor.checks.health import PROBE as HEALTH_PROBE
from ds_doctor.reports.fleet import (
    Deviation,
    Drift,
    FailedCase,
    Fleet,
    MeasureCell,
    NodeView,
    Spread,
    Unreadable,
)
from ds_doctor.reports.measures import MEASURES, finite, on_shared_gpu
from ds_doctor.reports.model import FAILING, Report, parse_time
from ds_doctor.reports.sections import GpuReading

#: Environment variables that name one run or one launch, not the node: they differ between any two nightly runs.
PER_RUN = (
    "env:SLURM_",
    "env:TORCHELASTIC_",
    "env:MASTER_",
    "env:DS_DOCTOR_",
    "env:WORLD_SIZE",
    "env:LOCAL_WORLD_SIZE",
)


#: How far a node's clock may run ahead of the reader's. A run dated later than that is not taken as its host's
#: latest: the newest report of a host is the one the fleet shows, so a forged date far ahead (2099) would hide
#: every real report of the host, failing ones included, for good.
CLOCK_SKEW = dt.timedelta(days=1)
FUTURE = "dated in the future"


def future_dated(started_at: str, finished_at: str, now: dt.datetime | None = None) -> str | None:
    """Why a run is left out of its host's view where either of its times is later than `now` (the reader's clock)
    by more than CLOCK_SKEW; else None. A time that does not parse is not this check's to refuse."""
    limit = (now or dt.datetime.now(dt.timezone.utc)) + CLOCK_SKEW
    for name, text in (("started_at", started_at), ("finished_at", finished_at)):
        try:
            late = parse_time(text) > limit
        except (TypeError, ValueError, AttributeError, OverflowError):
            continue
        if late:
            return future_reason(name, text)
    return None


def future_reason(name: str, text: str) -> str:
    """The one line that names a run dated in the future by its time `name` (as written: `text`)."""
    return f"{FUTURE} ({name} {text:.40}): not taken as the host's latest"


@dataclasses.dataclass(frozen=True)
class Source:
    """A report as read, and where from."""

    source: str
    report: Report
    across: int = 0  # one node's part of a multi-node report: how many nodes that run spanned

    @property
    def anonymized(self) -> bool:
        """An `--anonymize`d report's host is a placeholder (`host-1` on every node): it names no node."""
        return "--anonymize" in self.report.command

    @property
    def host(self) -> str:
        return str(self.report.hardware.host or "(no host)")

    def identity(self) -> str:
        return f"{self.host} ({self.source})" if self.anonymized else self.host

    def when(self) -> tuple[Any, ...]:
        return parse_time(self.report.started_at), parse_time(self.report.finished_at), self.source


@dataclasses.dataclass(frozen=True)
class NodeFacts:
    """What the fleet compares of one node's run, and nothing more: read from a report (by a reader process, which
    then drops the report) or from the results table's rows (`ds_doctor.reports.table`). Ten thousand of these fit
    in a few hundred MB; ten thousand reports did not."""

    source: str
    host: str
    anonymized: bool
    started_at: str
    finished_at: str
    outcomes: dict[str, int]
    fingerprint: dict[str, str]
    gpus: str  # the group its measures are compared within (`gpu_models`)
    measures: tuple[
        tuple[str, str, float], ...
    ] = ()  # (case, measure, value): compared, of its one-node cases
    shared_gpu: tuple[str, ...] = ()  # cases with compared measures whose ranks shared a GPU
    failing: tuple[FailedCase, ...] = ()
    health: tuple[FailedCase, ...] = ()
    notes: tuple[str, ...] = ()

    def identity(self) -> str:
        return f"{self.host} ({self.source})" if self.anonymized else self.host

    def when(self) -> tuple[Any, ...]:
        return parse_time(self.started_at), parse_time(self.finished_at), self.source


def _gpu_values(gpus: Sequence[GpuReading], field: str, convert: Any = str) -> str | None:
    values = sorted({convert(getattr(g, field)) for g in gpus if getattr(g, field) is not None})
    return ", ".join(values) if values else None


def _gib(value: Any) -> str:
    number = finite(value)
    return f"{number / 2**30:.0f}" if number is not None else str(value)[:60]


def report_fingerprint(report: Report) -> dict[str, str]:
    """The keys a rank's fingerprint (`ds_doctor.collect.fingerprint`) has, as a node's report records them; plus the
    GPU count, which a rank cannot see and a node can lose."""
    env, hardware = report.env, report.hardware
    prints = {"host": str(hardware.host), "python": str(env.python), "torch.cuda": str(env.cuda)}
    prints.update({f"package:{name}": str(version) for name, version in env.packages.items()})
    for key, value in (("torch.nccl", env.nccl), ("driver", env.driver), ("cuda_driver", env.cuda_driver)):
        if value is not None:
            prints[key] = str(value)
    gpus = hardware.gpus
    prints["gpu.count"] = str(len(gpus))
    for key, field, convert in (
        ("gpu.name", "name", str),
        ("gpu.memory_gib", "memory_total_bytes", _gib),
        ("gpu.compute_capability", "compute_capability", str),
    ):
        value = _gpu_values(gpus, field, convert)
        if value is not None:
            prints[key] = value
    variables = env.variables
    prints.update(
        {
            f"env:{name}": str(value)
            for name, value in variables.items()
            if not f"env:{name}".startswith(PER_RUN)
        }
    )
    return prints


def gpu_models(report: Report) -> str:
    """The group a node's measures are compared within."""
    return _gpu_values(report.hardware.gpus, "name") or "no GPU"


def newest_per_host(facts: Sequence[NodeFacts]) -> list[tuple[NodeFacts, list[str]]]:
    """Each host's newest run (by start, then finish time), with the sources of the older ones it replaced."""
    by_host: dict[str, list[NodeFacts]] = {}
    for fact in facts:
        by_host.setdefault(fact.identity(), []).append(fact)
    picked = []
    for _, group in sorted(by_host.items()):
        group.sort(key=NodeFacts.when)
        picked.append((group[-1], [older.source for older in reversed(group[:-1])]))
    return picked


def spreads(
    hosts: list[str], prints: list[dict[str, str]]
) -> tuple[list[Spread], dict[str, list[Deviation]]]:
    """The consistency rules over the nodes' fingerprints: each key that differs, and each node's deviations."""
    found: list[Spread] = []
    deviations: dict[str, list[Deviation]] = {host: [] for host in hosts}
    for split in disagreements(prints):
        others = {value: [hosts[i] for i in indices] for value, indices in split.outliers().items()}
        found.append(
            Spread(
                split.key, split.severity.value, split.majority, len(split.by_value[split.majority]), others
            )
        )
        for value, indices in split.outliers().items():
            for i in indices:
                deviations[hosts[i]].append(Deviation(split.key, value, split.majority, split.severity.value))
    return found, deviations


def _compared(result: Any) -> dict[str, float]:
    """A result's measures that are compared (better higher or lower) and are finite numbers."""
    numbers = {
        name: finite(value)
        for name, value in result.applicable_measures().items()
        if MEASURES[name].better is not None
    }
    return {name: number for name, number in numbers.items() if number is not None}


def compared_measures(report: Report) -> tuple[tuple[tuple[str, str, float], ...], tuple[str, ...]]:
    """(case, measure, value) of each compared measure of the report's one-node cases (across the nodes: the
    fabric's figure), and the cases left out because their ranks shared a GPU."""
    kept: list[tuple[str, str, float]] = []
    shared: list[str] = []
    for result in report.results:
        measures = _compared(result) if result.nodes == 1 else {}
        if measures and on_shared_gpu(result):
            shared.append(result.key)
            continue
        kept += [(result.key, name, value) for name, value in measures.items()]
    return tuple(kept), tuple(shared)


def measure_cells(nodes: list[tuple[str, NodeFacts]], tolerance_pct: float) -> dict[str, list[MeasureCell]]:
    """Each node's measures against the median of the nodes with the same GPUs."""
    groups: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
    for host, fact in nodes:
        for case, name, value in fact.measures:
            groups.setdefault((case, name, fact.gpus), []).append((host, value))
    cells: dict[str, list[MeasureCell]] = {host: [] for host, _ in nodes}
    for (case, name, gpus), values in sorted(groups.items()):
        median = statistics.median(value for _, value in values)
        for host, value in values:
            delta = (value - median) / median * 100 if median > 0 else None
            worse = (
                delta is not None
                and len(values) > 1
                and (delta < -tolerance_pct if MEASURES[name].better == "higher" else delta > tolerance_pct)
            )
            cells[host].append(MeasureCell(case, name, gpus, value, median, len(values), delta, worse))
    return cells


def failed_cases(report: Report) -> tuple[list[FailedCase], list[FailedCase]]:
    """(the failing cases, the failing GPU health cases) of a report."""
    failing: list[FailedCase] = []
    health: list[FailedCase] = []
    for result in report.results:
        if result.outcome not in FAILING:
            continue
        rules = tuple(f.invariant for f in result.findings if f.is_error)
        case = FailedCase(result.key, result.outcome.value, result.reason or "", rules)
        (health if result.probe == HEALTH_PROBE else failing).append(case)
    return failing, health


def per_node(source: Source) -> list[Source]:
    """A multi-node report as one source per node: that node's environment and hardware (what the fleet compares),
    the cases that ran on it, and those across the nodes (in each node's row). A report whose node sections are
    not that shape, or name no host of their own each (two "nodes" on one host), stays one row."""
    sections = source.report.nodes
    readable = all(n.has == ("env", "hardware") for n in sections)
    if not sections or not readable or len({n.host for n in sections}) < len(sections):
        return [source]
    # keyed as on one node
    return [
        Source(
            f"{source.source} (node {n.node} of {len(sections)})",
            dataclasses.replace(
                source.report,
                env=n.env,
                hardware=n.hardware,
                nodes=(),
                results=tuple(
                    dataclasses.replace(r, node=None)
                    for r in source.report.results
                    if r.node in (n.node, None)
                ),
            ),
            across=len(sections),
        )
        for n in sections
    ]


def _notes(source: Source) -> tuple[str, ...]:
    notes = []
    if source.anonymized:
        notes.append(
            f"{source.source}: an anonymized report (its host name is a placeholder): a row of its own"
        )
    if source.report.nodes:
        hosts = ", ".join(n.host for n in source.report.nodes)
        notes.append(
            f"a {len(source.report.nodes)}-node run ({hosts}): every node's cases in this one row (its "
            "node sections do not each name a host of their own)"
        )
    if source.report.stopped is not None:  # its `not_run` cases are no failures of the node
        notes.append(f"{source.source}: {source.report.stopped.headline}")
    if source.across:
        notes.append(
            f"one node of a {source.across}-node run: its cases across the nodes are in each node's row, "
            "their measures the fabric's, compared nowhere"
        )
    return tuple(notes)


def facts_of(source: Source) -> list[NodeFacts]:
    """The facts of each node of a report (one, or each node of a multi-node report: `per_node`)."""
    facts = []
    for part in per_node(source):
        report = part.report
        failing, health = failed_cases(report)
        measures, shared = compared_measures(report)
        facts.append(
            NodeFacts(
                source=part.source,
                host=part.host,
                anonymized=part.anonymized,
                started_at=report.started_at,
                finished_at=report.finished_at,
                outcomes=report.summary,
                fingerprint=report_fingerprint(report),
                gpus=gpu_models(report),
                measures=measures,
                shared_gpu=shared,
                failing=tuple(failing),
                health=tuple(health),
                notes=_notes(part),
            )
        )
    return facts


def build_fleet(
    sources: Sequence[Source | NodeFacts],
    unreadable: list[Unreadable],
    tolerance_pct: float,
    not_read: int = 0,
    drifts: Sequence[Drift] = (),
    window: str | None = None,
) -> Fleet:
    """The fleet's view of the newest run of each host (each node of a multi-node report is a host); with the
    measures that drift across nights (`ds_doctor.fleet.drift`) over `window` when asked."""
    facts = [f for source in sources for f in (facts_of(source) if isinstance(source, Source) else [source])]
    picked = newest_per_host(facts)
    hosts = [fact.identity() for fact, _ in picked]
    found, deviations = spreads(hosts, [fact.fingerprint for fact, _ in picked])
    cells = measure_cells(
        [(host, fact) for host, (fact, _) in zip(hosts, picked, strict=True)], tolerance_pct
    )
    views = []
    for host, (fact, older) in zip(hosts, picked, strict=True):
        views.append(
            NodeView(
                host=host,
                source=fact.source,
                started_at=fact.started_at,
                outcomes=fact.outcomes,
                failing=fact.failing,
                gpu_health=fact.health,
                deviations=tuple(deviations[host]),
                measures=tuple(cells[host]),
                shared_gpu=fact.shared_gpu,
                superseded=tuple(older),
                notes=fact.notes,
                drifting=tuple(d for d in drifts if d.host == host),
            )
        )
    views.sort(key=lambda view: (not view.failed, view.host))
    return Fleet(
        tolerance_pct, tuple(views), tuple(found), tuple(unreadable), not_read, tuple(drifts), window
    )

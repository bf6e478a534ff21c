"""node_exporter textfile-collector metrics from a report (`--prometheus FILE`), built and written with
prometheus_client (a registry of gauges, rendered by `generate_latest`), written as every user-named output is
(`ds_doctor.files.write_output`: a temp file of an unpredictable name renamed over the target; the client's own
`write_to_textfile` opens a temp name anyone can predict, and follows a link planted there).

One series per case (1, labelled with the outcome it had, so alerts can match `outcome="fail"`; a stopped run's
unfinished cases `outcome="not_run"`, which no alert counts as a failure), counts per outcome, a stopped run's
`run_stopped` (the signal that stopped it), findings per severity, each GPU health finding by rule, the node's fault
records (findings by record and rule, Xid counts, AER counters, InfiniBand ports up), the run's start time and duration,
and every measure `ds_doctor.reports.measures.MEASURES` compares with a baseline (bandwidths, TFLOP/s), where it
means something at the case's world size. Labels carry host, probe and case. With the node's baseline report
(`run --baseline`), each such measure relative to the baseline's (`measure_baseline_ratio`: below 1 is worse,
whichever way the measure is better) and the tolerance it was given, so an alert can say "below the baseline by
more than the tolerance" (contrib/prometheus/ds-doctor.rules.yml). What ranks sharing one GPU measured between
them is no node's figure and gets no ratio.

Label values come from data: each goes through `ds_doctor.reports.safe.prom_label` (control characters shown escaped;
prometheus_client escapes `\\`, `"` and newlines as the text format wants). Names go through `prom_name`
(`[a-zA-Z_][a-zA-Z0-9_]*`: the client takes any name now and would quote it, which the 0.0.4 format
node_exporter reads has no way to say).
"""

from __future__ import annotations

from collections import Counter
from typing import TypeVar

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from ds_doctor.reports.measures import MEASURES, finite, on_shared_gpu
from ds_doctor.reports.model import Report, Severity, parse_time
from ds_doctor.reports.noderecords import AER_KINDS, NodeRecords, SourceRecord, SourceState
from ds_doctor.reports.safe import prom_label, prom_name
from ds_doctor.reports.views import GpuCheck, NodeRecordCheck, view_of

PREFIX = "ds_doctor"
R = TypeVar("R", bound=SourceRecord)


class _Gauge:
    """A gauge whose label values are made safe where they are given."""

    def __init__(
        self, registry: CollectorRegistry, name: str, help_text: str, labels: tuple[str, ...]
    ) -> None:
        self.gauge = Gauge(
            prom_name(f"{PREFIX}_{name}"),
            prom_label(help_text),
            tuple(prom_name(n) for n in labels),
            registry=registry,
        )

    def labels(self, *values: object) -> Gauge:
        return self.gauge.labels(*(prom_label(v) for v in values))


def _gauge(registry: CollectorRegistry, name: str, help_text: str, labels: tuple[str, ...]) -> _Gauge:
    return _Gauge(registry, name, help_text, labels)


def _run_gauges(registry: CollectorRegistry, report: Report, host: str) -> None:
    started, finished = parse_time(report.started_at), parse_time(report.finished_at)
    _gauge(
        registry, "run_start_timestamp_seconds", "When the ds-doctor run started (Unix time).", ("host",)
    ).labels(host).set(started.timestamp())
    _gauge(registry, "run_duration_seconds", "How long the ds-doctor run took.", ("host",)).labels(host).set(
        (finished - started).total_seconds()
    )
    cases = _gauge(registry, "cases", "Cases by outcome in the last run.", ("host", "outcome"))
    for outcome, count in report.summary.items():
        cases.labels(host, outcome).set(count)
    if report.stopped is not None:  # its unfinished cases: `cases{outcome="not_run"}`
        _gauge(
            registry,
            "run_stopped",
            "1: the last run stopped before its last case, by this signal (`none`: its doctor was killed unawares).",
            ("host", "signal"),
        ).labels(host, report.stopped.signal or "none").set(1)


def _case_gauges(registry: CollectorRegistry, report: Report, host: str) -> None:
    # One series per case: the outcome it had (a series per outcome, 0 for the others, was 7 per case: ~1,400 a
    # node at level 3, a million across a 1,000-node fleet); a case that changes outcome changes its series.
    outcome = _gauge(
        registry,
        "case_outcome",
        "1 for each case, labelled with the outcome it had in the last run.",
        ("host", "probe", "case", "outcome"),
    )
    findings = _gauge(registry, "findings", "Findings by severity in the last run.", ("host", "severity"))
    for result in report.results:
        outcome.labels(host, result.probe, result.key, result.outcome.value).set(1)
    for level in Severity:
        findings.labels(host, level.value).set(
            sum(f.severity == level for r in report.results for f in r.findings)
        )
    health = [
        (check.gpu, f.invariant, f.severity.value)
        for r in report.results
        if (check := view_of(r, GpuCheck)) is not None
        for f in check.findings
    ]
    if health:
        gauge = _gauge(
            registry,
            "gpu_health_finding",
            "1 per GPU health finding (NVML) in the last run, by rule.",
            ("host", "gpu", "rule", "severity"),
        )
        for gpu, rule, severity in health:
            gauge.labels(host, gpu, rule, severity).set(1)


def _record_findings(registry: CollectorRegistry, report: Report, host: str) -> None:
    checks = (view_of(result, NodeRecordCheck) for result in report.results)
    findings = Counter(
        (check.record, f.invariant, f.severity.value)
        for check in checks
        if check is not None
        for f in check.findings
    )
    if findings:
        gauge = _gauge(
            registry,
            "node_record_finding",
            "Findings over the node's fault records (Xid, AER, InfiniBand, DCGM) in the last run, by rule.",
            ("host", "record", "rule", "severity"),
        )
        for (record, rule, severity), count in findings.items():
            gauge.labels(host, record, rule, severity).set(count)


def _read(record: R | None) -> R | None:
    """The record where the node read it (its entries are exported), None where it was absent or unavailable."""
    return record if record is not None and record.state is SourceState.READ else None


def _count(value: int | None) -> float | None:
    """A record's count as a gauge takes it: an integer within a float's range, else None (a record of a report read
    back is data: an integer of 400 digits is no count)."""
    return finite(value) if value is not None else None


def _record_series(registry: CollectorRegistry, records: NodeRecords, host: str) -> None:
    xid, aer, ib = _read(records.xid), _read(records.aer), _read(records.ib)
    events = [
        (event, count)
        for event in (xid.events if xid is not None else ())
        if (count := _count(event.count)) is not None
    ]
    if events:
        xids = _gauge(
            registry, "xid_total", "Xid errors in the kernel log since boot.", ("host", "pci", "xid")
        )
        for event, count in events:
            xids.labels(host, event.pci, event.xid).set(count)
    if aer is not None and aer.devices:
        errors = _gauge(registry, "aer_errors", "PCIe AER errors since boot.", ("host", "pci", "kind"))
        for device in aer.devices:
            for kind in AER_KINDS:
                if (count := _count(device.total(kind))) is not None:
                    errors.labels(host, device.bdf, kind).set(count)
    if ib is not None and ib.ports:
        up = _gauge(registry, "ib_port_up", "1 if the port is ACTIVE and LinkUp.", ("host", "device", "port"))
        for port in ib.ports:
            up.labels(host, port.device, port.port).set(float(port.is_up()))


def _node_record_gauges(registry: CollectorRegistry, report: Report, host: str) -> None:
    """The node's fault records (ds_doctor.hardware.records, ds_doctor.checks.noderecords): how many findings by
    record, rule and severity; each Xid's count by GPU; each AER counter by device and kind; each IB port up or
    not."""
    _record_findings(registry, report, host)
    records = report.hardware.node_records
    if records is not None:
        _record_series(registry, records, host)


def _measure_gauges(registry: CollectorRegistry, report: Report, host: str) -> None:
    for name, measure in MEASURES.items():
        samples = [
            (r.probe, r.key, value)
            for r in report.results
            if not on_shared_gpu(r)  # no node's figure
            for key, value in r.applicable_measures().items()
            if key == name and value is not None
        ]
        if measure.better is None or not samples:
            continue
        gauge = _gauge(registry, name, measure.help, ("host", "probe", "case"))
        for probe, case, value in samples:
            gauge.labels(host, probe, case).set(value)


def baseline_ratios(report: Report, baseline: Report) -> list[tuple[str, str, str, float]]:
    """(probe, case, measure, ratio) for each compared measure both reports have: new over baseline where higher is
    better, baseline over new where lower is, so below 1 is always worse."""
    before = {r.key: r.applicable_measures() for r in baseline.results if not on_shared_gpu(r)}
    ratios = []
    for result in report.results:
        if result.key not in before or on_shared_gpu(result):
            continue
        for name, value in result.applicable_measures().items():
            old, new, better = (
                _positive(before[result.key].get(name)),
                _positive(value),
                MEASURES[name].better,
            )
            if better is not None and old is not None and new is not None:
                ratios.append(
                    (result.probe, result.key, name, new / old if better == "higher" else old / new)
                )
    return ratios


def _positive(value: object) -> float | None:
    """A measure as a positive finite float, or None."""
    number = finite(value)
    return number if number is not None and number > 0 else None


def _baseline_gauges(
    registry: CollectorRegistry, report: Report, baseline: Report, tolerance_pct: float, host: str
) -> None:
    _gauge(
        registry,
        "baseline_tolerance_percent",
        "Percent a measure may fall below the node's baseline (run --tolerance).",
        ("host",),
    ).labels(host).set(tolerance_pct)
    ratios = baseline_ratios(report, baseline)
    if ratios:
        gauge = _gauge(
            registry,
            "measure_baseline_ratio",
            "A measure relative to the node's baseline report: 1 the "
            "same, below 1 worse (whichever way the measure is better).",
            ("host", "probe", "case", "measure"),
        )
        for probe, case, name, ratio in ratios:
            gauge.labels(host, probe, case, name).set(ratio)


def build_registry(
    report: Report, baseline: Report | None = None, tolerance_pct: float = 10.0
) -> CollectorRegistry:
    registry = CollectorRegistry()
    host = str(report.hardware.host or "")
    _run_gauges(registry, report, host)
    _case_gauges(registry, report, host)
    _node_record_gauges(registry, report, host)
    _measure_gauges(registry, report, host)
    if baseline is not None:
        _baseline_gauges(registry, report, baseline, tolerance_pct, host)
    return registry


def render_prometheus(report: Report, baseline: Report | None = None, tolerance_pct: float = 10.0) -> str:
    """The textfile's contents (Prometheus text format 0.0.4); with the node's baseline, the ratios to it."""
    return generate_latest(build_registry(report, baseline, tolerance_pct)).decode()

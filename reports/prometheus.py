"""node_exporter textfile-collector metrics from a report (`--prometheus FILE`), written atomically.

One gauge per case and outcome (1 for the outcome it had, so alerts can match `outcome="fail"`),
counts per outcome, findings per severity, each GPU health finding by rule, the run's start time and
duration, and any measured
bandwidth (GB/s) or TFLOP/s a probe put in its notes (`busbw_gbps`, `algbw_gbps`, `tflops`).
Labels carry host, probe and case; values are escaped as the text format requires.
"""

from __future__ import annotations

from collections.abc import Iterable

from doctor.outcomes import Outcome
from reports.model import Report

PREFIX = "ds_doctor"
MEASURES = {"busbw_gbps": "bus bandwidth in GB/s (nccl-tests' definition)",
            "algbw_gbps": "algorithm bandwidth in GB/s", "tflops": "achieved TFLOP/s"}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items()) + "}"


def _family(name: str, help_text: str, samples: Iterable[tuple[str, float]]) -> list[str]:
    lines = [f"# HELP {PREFIX}_{name} {help_text}", f"# TYPE {PREFIX}_{name} gauge"]
    lines += [f"{PREFIX}_{name}{labels} {value:g}" for labels, value in samples]
    return lines


def render_prometheus(report: Report) -> str:
    from doctor.runner import parse_iso

    host = str(report.hardware.get("host") or "")
    started, finished = parse_iso(report.started_at), parse_iso(report.finished_at)
    lines = _family("run_start_timestamp_seconds", "When the ds-doctor run started (Unix time).",
                    [(_labels(host=host), started.timestamp())])
    lines += _family("run_duration_seconds", "How long the ds-doctor run took.",
                     [(_labels(host=host), (finished - started).total_seconds())])
    lines += _family("cases", "Cases by outcome in the last run.",
                     [(_labels(host=host, outcome=o), n) for o, n in report.summary.items()])
    lines += _family("case_outcome", "1 for the outcome each case had in the last run, 0 for the others.",
                     [(_labels(host=host, probe=r.probe, case=r.case, outcome=o.value), float(r.outcome == o))
                      for r in report.results for o in Outcome])
    lines += _family("case_findings", "Findings per case and severity in the last run.",
                     [(_labels(host=host, probe=r.probe, case=r.case, severity=s),
                       sum(f.severity == s for f in r.findings))
                      for r in report.results for s in ("error", "warning", "info")])
    health = [(_labels(host=host, gpu=r.case, rule=f.invariant, severity=f.severity), 1.0)
              for r in report.results if r.probe == "gpu_health" for f in r.findings]
    if health:
        lines += _family("gpu_health_finding", "1 per GPU health finding (NVML) in the last run, by rule.", health)
    for key, help_text in MEASURES.items():
        samples = [(_labels(host=host, probe=r.probe, case=r.case), float(r.notes[key]))
                   for r in report.results if isinstance(r.notes.get(key), (int, float))]
        if samples:
            lines += _family(key, help_text, samples)
    return "\n".join(lines) + "\n"

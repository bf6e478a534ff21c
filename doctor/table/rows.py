"""A report as rows of the results table, and rows back as the fleet's facts.

One row per node record (`kind` node), per fingerprint key (fingerprint: what `fleet` compares across nodes), per
case (case), per case and measure (measure; `rank` is null: a case's measures are the case's), and per finding
(finding, with its rank). Every row carries the run, the host, the start and the GPU models; the night (the UTC
date the run started) and the node (the host as one safe path component) are the partitions, in the folders'
names (`night=2026-11-28/node=gpu-017/`), not in the files. A multi-node report is one file per node.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ds_doctor.fleet.facts import NodeFacts, Source, facts_of
from ds_doctor.reports.fleet import FailedCase
from ds_doctor.reports.measures import MEASURES, finite, on_shared_gpu
from ds_doctor.reports.model import FAILING, Outcome, Report, parse_time

#: The columns, in order, with their Arrow types' names (`ds_doctor.table.parquet` builds the schema from these).
COLUMNS: tuple[tuple[str, str], ...] = (
    ("run", "string"),  # the report's name: ds-doctor-<host>-<UTC time>
    ("host", "string"),  # the node's host name as its report says
    ("started_at", "timestamp"),  # the run's start, UTC
    ("kind", "string"),  # node | fingerprint | case | measure | finding
    ("gpus", "string"),  # the node's GPU models ("no GPU"): measures are compared within one
    ("case", "string"),
    ("probe", "string"),
    ("outcome", "string"),  # a case's outcome
    ("reason", "string"),  # a case's reason
    ("rank", "int32"),  # a finding's rank
    ("measure", "string"),
    ("value", "float64"),
    ("better", "string"),  # higher | lower | null (a count, a size)
    ("compared", "bool"),  # a measure the fleet compares: a one-node case whose ranks had GPUs of their own
    ("key", "string"),  # a fingerprint key
    ("text", "string"),  # a fingerprint value; the node row's facts as JSON
    ("invariant", "string"),
    ("severity", "string"),
    ("message", "string"),
)
NAMES = tuple(name for name, _ in COLUMNS)
MESSAGE_CHARS = 2000  # a finding's message in the table (the report has it whole)
FAILING_VALUES = frozenset(outcome.value for outcome in FAILING)


def night_of(started_at: str) -> dt.date:
    """The UTC date a run started on: its night (a time without a zone is taken as UTC)."""
    when = parse_time(started_at)
    return (when if when.tzinfo is None else when.astimezone(dt.timezone.utc)).date()


def _row(**values: Any) -> dict[str, Any]:
    return {name: values.get(name) for name in NAMES}


def node_parts(report: Report, run: str) -> list[tuple[NodeFacts, Report]]:
    """Each node of `report` (one, or each of a multi-node report) with its facts and its part of the report."""
    from ds_doctor.fleet.facts import per_node

    source = Source(run, report)
    return [(facts_of(part)[0], part.report) for part in per_node(source)]


def rows_of(facts: NodeFacts, report: Report, run: str) -> list[dict[str, Any]]:
    """One node's rows of one run."""
    when = parse_time(report.started_at)
    common = {"run": run, "host": facts.host, "started_at": when, "gpus": facts.gpus}
    node = {
        "source": facts.source,
        "started_at": facts.started_at,  # as the report wrote it (the column is a timestamp)
        "finished_at": facts.finished_at,
        "anonymized": facts.anonymized,
        "outcomes": facts.outcomes,
        "notes": list(facts.notes),
        "shared_gpu": list(facts.shared_gpu),
        "level": report.level,
    }
    rows = [_row(kind="node", text=json.dumps(node), **common)]
    rows += [_row(kind="fingerprint", key=k, text=v, **common) for k, v in sorted(facts.fingerprint.items())]
    compared = {(case, name) for case, name, _ in facts.measures}
    for result in report.results:
        case = {"case": result.key, "probe": result.probe, **common}
        rows.append(_row(kind="case", outcome=result.outcome.value, reason=result.reason, **case))
        for name, value in result.applicable_measures().items():
            number = finite(value)
            if number is None:
                continue
            better = MEASURES[name].better
            rows.append(
                _row(
                    kind="measure",
                    measure=name,
                    value=number,
                    better=better,
                    compared=(result.key, name) in compared and not on_shared_gpu(result),
                    **case,
                )
            )
        rows += [
            _row(
                kind="finding",
                rank=f.rank,
                invariant=f.invariant,
                severity=f.severity.value,
                message=f.message[:MESSAGE_CHARS],
                **case,
            )
            for f in result.findings
        ]
    return rows


def facts_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[NodeFacts]:
    """The fleet's facts of each (host, run) in `rows` (as `rows_of` wrote them; strings scrubbed here: a table is
    data from anywhere)."""
    from ds_doctor.redact import scrub

    runs: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in rows:
        row = {
            name: scrub(value)[:MESSAGE_CHARS] if isinstance(value, str) else value
            for name, value in raw.items()
        }
        if row["kind"] == "fingerprint" and isinstance(
            raw["key"], str
        ):  # a value under a secret's name is masked
            row["text"] = scrub({raw["key"]: raw["text"]})[row["key"]]
        run = runs.setdefault(
            (str(row["host"]), str(row["run"])),
            {"node": None, "fingerprint": {}, "cases": {}, "measures": [], "rules": {}, "gpus": row["gpus"]},
        )
        kind = row["kind"]
        if kind == "node":
            run["node"] = row
        elif kind == "fingerprint" and row["key"] is not None:
            run["fingerprint"][str(row["key"])] = str(row["text"])
        elif kind == "case":
            run["cases"][row["case"]] = row
        elif kind == "measure" and row["compared"] and row["measure"] in MEASURES:
            value = finite(row["value"])
            if value is not None:
                run["measures"].append((str(row["case"]), str(row["measure"]), value))
        elif kind == "finding" and row["severity"] == "error":
            run["rules"].setdefault(row["case"], []).append(str(row["invariant"]))
    return [_facts(host, name, run) for (host, name), run in sorted(runs.items()) if run["node"] is not None]


def _facts(host: str, name: str, run: dict[str, Any]) -> NodeFacts:
    from ds_doctor.checks.health import PROBE as HEALTH_PROBE

    node = run["node"]
    try:
        about = json.loads(node["text"] or "{}")
    except ValueError:
        about = {}
    about = about if isinstance(about, dict) else {}
    failing: list[FailedCase] = []
    health: list[FailedCase] = []
    for case, row in sorted(run["cases"].items(), key=lambda item: str(item[0])):
        if row["outcome"] not in FAILING_VALUES:
            continue
        failed = FailedCase(
            str(case), str(row["outcome"]), str(row["reason"] or ""), tuple(run["rules"].get(case, ()))
        )
        (health if row["probe"] == HEALTH_PROBE else failing).append(failed)
    started = node["started_at"]
    outcomes = about.get("outcomes")
    return NodeFacts(
        source=str(about.get("source") or name),
        host=host,
        anonymized=bool(about.get("anonymized")),
        started_at=str(
            about.get("started_at") or (started.isoformat() if isinstance(started, dt.datetime) else started)
        ),
        finished_at=str(about.get("finished_at") or started),
        outcomes={str(k): int(v) for k, v in outcomes.items() if isinstance(v, int)}
        if isinstance(outcomes, dict)
        else {o.value: 0 for o in Outcome},
        fingerprint=run["fingerprint"],
        gpus=str(run["gpus"]),
        measures=tuple(run["measures"]),
        shared_gpu=tuple(str(c) for c in about.get("shared_gpu", ()) if isinstance(c, str)),
        failing=tuple(failing),
        health=tuple(health),
        notes=tuple(str(n) for n in about.get("notes", ()) if isinstance(n, str)),
    )

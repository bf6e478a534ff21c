"""Reports from what is on disk: a run directory (also one whose doctor was killed), or a report file.

`ds-doctor run` writes `run.json` (the plan, the environment) into its run directory before the
first launch; the ranks append one fsynced JSON line per finished case. From those alone a report
is rebuilt: cases whose every rank finished are merged as in a live run; a case some rank never
finished is an `error` marked as unfinished. A truncated line (a rank killed mid-write) is skipped
with a warning; the rest is rendered.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from doctor.files import write_atomic
from doctor.outcomes import Outcome
from probes.base import Case, ProbeSpec
from reports.model import SCHEMA_VERSION, CaseResult, RankSummary, Report

MANIFEST = "run.json"
MANIFEST_VERSION = 1
UNFINISHED = "did not finish: the run stopped before every rank reported this case (was ds-doctor killed?)"


class InputError(Exception):
    """The path given to `ds-doctor report` is not something it can read; one line, exit code 2."""


def case_entry(case: Case, device_kind: str) -> dict[str, Any]:
    """A planned case as the manifest keeps it: enough to merge its lines without the probe registry."""
    import probes

    spec = probes.get(case.probe).SPEC
    return {"case": case.id, "probe": case.probe, "scenario": case.scenario, "variant": case.variant,
            "world_size": case.world_size, "level": case.level, "reproduce": case.reproduce,
            "device_kind": device_kind, "known_issues": list(spec.known_issues)}


def _case_and_spec(entry: Mapping[str, Any]) -> tuple[Case, ProbeSpec]:
    case = Case(probe=entry["probe"], scenario=entry["scenario"], variant=entry["variant"],
                world_size=int(entry["world_size"]), level=int(entry["level"]), params={},
                reproduce=bool(entry["reproduce"]))
    spec = ProbeSpec(name=entry["probe"], scenario=entry["scenario"], description="",
                     known_issues=tuple(entry.get("known_issues", ())))
    return case, spec


def write_manifest(run_dir: Path, *, started: str, level: int, argv: tuple[str, ...], env: Mapping[str, Any],
                   hardware: Mapping[str, Any], planned: list[dict[str, Any]], skips: list[dict[str, Any]],
                   keyword: str | None = None) -> None:
    manifest = {"manifest_version": MANIFEST_VERSION, "started_at": started, "level": level, "argv": list(argv),
                "keyword": keyword, "env": env, "hardware": hardware, "planned": planned, "skips": skips}
    write_atomic(run_dir / MANIFEST, json.dumps(manifest, indent=1, default=str))


def read_json_lines(path: Path, warnings: list[str]) -> list[dict[str, Any]]:
    """Every complete JSON line of a rank's result file; a truncated or broken one is skipped with a warning."""
    lines = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
            if not isinstance(line, dict) or "case" not in line or "rank" not in line:
                raise ValueError("not a result line")
            lines.append(line)
        except ValueError:
            warnings.append(f"{path}: line {number} is truncated or not a result line; skipped")
    return lines


def _load_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST
    if not path.is_file():
        raise InputError(f"{run_dir} is not a ds-doctor run directory (no {MANIFEST})")
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or "planned" not in manifest:
        raise InputError(f"{path}: not a ds-doctor run manifest")
    if int(manifest.get("manifest_version", 0)) > MANIFEST_VERSION:
        raise InputError(f"{path}: written by a newer ds-doctor (manifest version {manifest['manifest_version']})")
    return manifest


def report_from_run_dir(run_dir: Path, *, anonymize: bool = False) -> tuple[Report, list[str]]:
    """Rebuild the report of a run from its directory; returns the report and the warnings."""
    from doctor.results import merge_case, skipped_case
    from doctor.runner import build_report, parse_iso, selected_health

    manifest = _load_manifest(run_dir)
    warnings: list[str] = []
    by_case: dict[str, dict[int, dict[str, Any]]] = {}
    for path in sorted(run_dir.glob("ws*/rank*.jsonl")):
        for line in read_json_lines(path, warnings):
            by_case.setdefault(line["case"], {})[int(line["rank"])] = line
    versions = manifest["env"].get("packages", {})
    results: list[CaseResult] = []
    try:
        for entry in manifest["planned"]:
            case, spec = _case_and_spec(entry)
            lines = by_case.get(case.id, {})
            if len(lines) == case.world_size:
                results.append(merge_case(case, spec, list(lines.values()), entry["device_kind"], versions))
            else:
                results.append(_unfinished(case, entry["device_kind"], lines))
        for entry in manifest["skips"]:
            results.append(skipped_case(_case_and_spec(entry)[0], entry["device_kind"], entry["reason"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{run_dir / MANIFEST}: a planned case is incomplete ({type(exc).__name__}: {exc})") from None
    order = [e["case"] for e in manifest["planned"]] + [e["case"] for e in manifest["skips"]]
    results.sort(key=lambda r: order.index(r.case))
    results = selected_health(manifest["hardware"], manifest.get("keyword")) + results  # as `run` puts them
    mtimes = [p.stat().st_mtime for p in run_dir.rglob("*") if p.is_file()]
    finished = dt.datetime.fromtimestamp(max(mtimes), dt.timezone.utc)
    started = parse_iso(manifest["started_at"])
    report = build_report(started=started, finished=finished, level=int(manifest["level"]),
                          argv=tuple(manifest["argv"]), env=manifest["env"], hardware=manifest["hardware"],
                          results=results, run_dir=run_dir, anonymize=anonymize)
    return report, warnings


def _unfinished(case: Any, device_kind: str, lines: Mapping[int, Mapping[str, Any]]) -> CaseResult:
    ranks = []
    for rank in range(case.world_size):
        line = lines.get(rank)
        if line is None:
            ranks.append(RankSummary(rank=rank, outcome=Outcome.ERROR.value, stage="unknown", reason=UNFINISHED))
        else:
            ranks.append(RankSummary(rank=rank, outcome=line["outcome"], stage=line.get("stage"),
                                     reason=line.get("reason")))
    return CaseResult(probe=case.probe, case=case.id, scenario=case.scenario, level=case.level,
                      world_size=case.world_size, device_kind=device_kind, outcome=Outcome.ERROR, duration_s=0.0,
                      reason=UNFINISHED, ranks=tuple(ranks), notes={"unfinished": True})


def load_report_file(path: Path, *, anonymize: bool = False) -> Report:
    """A report JSON, checked: empty, malformed, another schema and a newer schema are input errors."""
    import jsonschema

    from reports.model import validate

    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read it ({exc})") from None
    if not text.strip():
        raise InputError(f"{path}: empty file")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    tool = data.get("tool") if isinstance(data, dict) else None
    if not isinstance(tool, dict) or tool.get("name") != "ds-doctor":
        raise InputError(f"{path}: not a ds-doctor report")
    version = data.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise InputError(f"{path}: schema version {version} is newer than this ds-doctor reads ({SCHEMA_VERSION})")
    try:
        validate(data)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "top level"
        raise InputError(f"{path}: not a valid ds-doctor report at {where}: {exc.message[:200]}") from None
    from doctor.redact import Anonymizer, scrub

    data = scrub(data)  # a report written by an older ds-doctor may predate a pattern
    if anonymize:
        data = Anonymizer.for_this_machine(extra_hosts=[str(data["hardware"].get("host") or "")])(data)
    return Report.from_dict(data)

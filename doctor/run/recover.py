"""Reports from what is on disk: a run directory (also one whose doctor was killed), or a report file.

A report file, a manifest and a run directory are user input too (attached to tickets): they are read with the
bounds of `ds_doctor.userinput`, and anything of the wrong shape is an `InputError`, one line.

`ds-doctor run` writes the manifest (the plan, the environment) into its run directory before the
first launch; the ranks append one fsynced rank line per finished case, and the parent the lines of the cases a
launch's timeout or crash took down. From those alone a report is rebuilt: cases whose every rank finished are
merged as in a live run; a case some rank never finished is `not_run` (the run stopped before it: it says nothing
of the stack), and the report says the run stopped (`Report.stopped`: the signal, where the run recorded one, and
how many of its planned cases finished). A truncated line (a rank killed mid-write) is skipped with a warning; the
rest is rendered.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ds_doctor.knowledge import catalog
from ds_doctor.redact import scrub
from ds_doctor.reports.model import (
    TIME_EXAMPLE,
    CaseResult,
    Outcome,
    RankSummary,
    Report,
    RunStop,
    finite_json,
    load_schema,
    parse_time,
)
from ds_doctor.run import judge
from ds_doctor.run.build import anonymize, build_report
from ds_doctor.run.merge import merge_case, skipped_case
from ds_doctor.run.plan import KeywordError, keyword_matcher, run_node_checks
from ds_doctor.rundir import MANIFEST_VERSION, Manifest, PlannedCase, RankLine, RunDir, read_rank_lines
from ds_doctor.userinput import (
    MAX_REPORT_BYTES,
    UserInputError,
    check_report,
    check_tree,
    check_world_size,
    parse_json,
    read_file,
    short,
)

UNFINISHED = judge.UNFINISHED  # the judge says it; readers of a stopped run's report name it from here


class InputError(UserInputError):
    """A path given to `ds-doctor report` or `diff` is not something it can read; one line, exit code 2 (a
    click.UsageError wherever it is raised)."""


#: what turning checked JSON into records may still raise on a value of the right JSON type but no sense
_CONVERSION = (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError)


def _read_json(path: Path, *, summary: bool = False) -> Any:
    """A report or manifest, read with the bounds of `ds_doctor.userinput`: its size, its nesting (of what is kept,
    for a `summary`: the parser itself stops at Python's recursion limit)."""
    read = read_file(path, limit=MAX_REPORT_BYTES, error=InputError, kind="report")
    text = read.text(InputError)
    if not text.strip():
        raise InputError(f"{path}: empty file")
    if not summary:
        return parse_json(text, str(path), InputError, label="not valid JSON")
    data = summary_of(
        _fast_json(text) or parse_json(text, str(path), InputError, label="not valid JSON", check=False)
    )
    check_tree(data, str(path), InputError)
    return data


def _fast_json(text: str) -> Any:
    """`text` parsed by orjson where it is installed (the `table` extra: three times faster than `json` on a report,
    what `fleet` over a cluster's reports spends most of its time on); None where it is not, or where orjson
    refuses what `json` may read (NaN, an integer past 64 bits, nesting past 1,024): `json` then reads it, and
    words its errors."""
    try:
        import orjson
    except ImportError:
        return None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


#: A planned case's (and a skip's) fields as `PlannedCase.from_dict` takes them, each with the JSON types it may hold
#: (a bool is a number only where bool is named); a field missing is `from_dict`'s to refuse
_PLANNED_FIELDS: dict[str, tuple[type, ...]] = {
    "case": (str,),
    "probe": (str,),
    "scenario": (str,),
    "variant": (str,),
    "world_size": (int,),
    "level": (int,),
    "reproduce": (bool,),
    "device_kind": (str,),
    "known_issues": (list,),
    "skip_reason": (str, type(None)),
    "reason": (str, type(None)),  # a skip's reason, as manifests before `skip_reason` named it
    "nodes": (int,),
    "node": (int, type(None)),
    "shared_gpu": (str, type(None)),
}


#: The JSON kinds `_PLANNED_FIELDS` names, as a message says them
_JSON_KINDS = {str: "a string", int: "an integer", bool: "true or false", list: "a list", type(None): "null"}


def _of_type(value: Any, kinds: tuple[type, ...]) -> bool:
    """`value` is one of `kinds`; a bool counts as an int only where `kinds` names bool (JSON's `true` is no count)."""
    return bool in kinds if isinstance(value, bool) else isinstance(value, kinds)


def _check_planned(planned: dict[str, Any], path: Path) -> None:
    """One planned case or skip, each field of the type `PlannedCase` holds, and every known issue it names one this
    ds-doctor knows: the rebuild hashes the case's name and looks its issues up before any schema sees them."""
    name = short(planned.get("case"))
    for key, kinds in _PLANNED_FIELDS.items():
        if key in planned and not _of_type(planned[key], kinds):
            said = " or ".join(_JSON_KINDS[kind] for kind in kinds)
            raise InputError(f"{path}: planned case {name} has {key} {short(planned[key])}, not {said}")
    for issue_id in planned.get("known_issues", ()):
        if not isinstance(issue_id, str):
            raise InputError(f"{path}: planned case {name} names known issue {short(issue_id)}, not a string")
        try:
            catalog.get(issue_id)
        except KeyError:
            raise InputError(
                f"{path}: planned case {name} names known issue {short(issue_id)}, which this ds-doctor does not "
                "know (a newer ds-doctor's run?)"
            ) from None


@functools.cache
def _section_validator(name: str) -> Any:
    """A validator of one section of a report (`env`, `hardware`) by the report schema's own definition of it."""
    import jsonschema

    schema = load_schema()
    section = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": f"#/$defs/{name}"}
    return jsonschema.validators.validator_for(schema)(section)


def _check_section(data: dict[str, Any], name: str, path: Path) -> None:
    """The manifest's `env` or `hardware` held to the report schema, as the rebuilt report is: they become its
    sections, and the node's own checks read them before that report is checked (a forged one would break them).
    Non-finite numbers are judged as the report holds them, as null."""
    import jsonschema

    if name not in data:
        return
    error = jsonschema.exceptions.best_match(_section_validator(name).iter_errors(finite_json(data[name])))
    if error is None:
        return
    where = "/".join([name, *(str(step) for step in error.absolute_path)])
    # jsonschema quotes the whole value: an integer of 400 digits would fill the one line
    said, message = repr(error.instance), error.message
    if message.startswith(said):
        message = short(error.instance) + message[len(said) :]
    raise InputError(f"{path}: not a valid ds-doctor run manifest at {where}: {message[:200]}")


def _check_keyword(keyword: Any, path: Path) -> None:
    """The run's `-k`, which the rebuild compiles again to filter the node's own checks: a string that compiles, or
    none."""
    if keyword is None:
        return
    if not isinstance(keyword, str):
        raise InputError(f"{path}: keyword is {short(keyword)}, not a -k expression")
    try:
        keyword_matcher(keyword)
    except KeywordError as exc:
        raise InputError(f"{path}: keyword: {exc}"[:300]) from None


def _check_stacks(stacks: list[Any], path: Path) -> None:
    """Each `--with` stack a name and its package versions (the rebuild looks each name up as a folder)."""
    for stack in stacks:
        if not (
            isinstance(stack, dict)
            and isinstance(stack.get("name"), str)
            and isinstance(stack.get("packages", {}), dict)
            and all(isinstance(v, (str, type(None))) for v in stack.get("packages", {}).values())
        ):
            raise InputError(f"{path}: a stack is {short(stack)}, not a name and its package versions")


def _check_manifest(data: dict[str, Any], path: Path) -> None:
    """Every part of a manifest the rebuild computes with before the rebuilt report is checked, of the type it
    needs: the manifest is data (a run directory handed over), and a wrong type there is one line, never a crash.
    Its `env` and `hardware` are held to the report schema once the planned cases are read (`_check_section`)."""
    shapes = {
        "env": dict,
        "hardware": dict,
        "planned": list,
        "skips": list,
        "argv": list,
        "started_at": str,
        "stacks": list,
    }
    for key, kind in shapes.items():
        if key in data and not isinstance(data[key], kind):
            raise InputError(
                f"{path}: {key} is {short(data[key])}, not a {'JSON object' if kind is dict else kind.__name__}"
            )
    if "level" in data and not _of_type(data["level"], (int,)):
        raise InputError(f"{path}: level is {short(data['level'])}, not an integer")
    if not all(isinstance(p, dict) for p in (*data.get("planned", ()), *data.get("skips", ()))):
        raise InputError(f"{path}: a planned case is not a JSON object")
    for planned in (*data.get("planned", ()), *data.get("skips", ())):
        _check_planned(planned, path)
    if not all(isinstance(arg, str) for arg in data.get("argv", ())):
        raise InputError(f"{path}: argv is {short(data['argv'])}, not a command line of strings")
    _check_stacks(data.get("stacks", ()), path)
    try:
        if "started_at" in data:
            parse_time(data["started_at"])
    except _CONVERSION:
        raise InputError(f"{path}: started_at is {short(data['started_at'])}, not a time") from None
    _check_keyword(data.get("keyword"), path)


def load_manifest(run_dir: RunDir) -> Manifest:
    if not run_dir.manifest.is_file():
        raise InputError(f"{run_dir.path} is not a ds-doctor run directory (no {RunDir.MANIFEST})")
    data = _read_json(run_dir.manifest)
    if not isinstance(data, dict) or "planned" not in data:
        raise InputError(f"{run_dir.manifest}: not a ds-doctor run manifest")
    version = data.get("manifest_version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(f"{run_dir.manifest}: manifest_version is {short(version)}, not a number")
    if version > MANIFEST_VERSION:
        raise InputError(f"{run_dir.manifest}: written by a newer ds-doctor (manifest version {version})")
    _check_manifest(data, run_dir.manifest)
    try:
        manifest = Manifest.from_dict(data)
    except _CONVERSION as exc:
        raise InputError(
            f"{run_dir.manifest}: a planned case is incomplete ({type(exc).__name__}: {exc})"[:300]
        ) from None
    for planned in manifest.planned:
        if not isinstance(planned.world_size, int):
            raise InputError(
                f"{run_dir.manifest}: {short(planned.case)} has world size {short(planned.world_size)}"
            )
        check_world_size(
            planned.world_size, f"{run_dir.manifest}: {short(planned.case)} has world size", InputError
        )
    # after the cases: a case's own wrong field is the more telling line
    for section in ("env", "hardware"):
        _check_section(data, section, run_dir.manifest)
    return manifest


def lines_by_case(run_dir: RunDir, warnings: list[str]) -> dict[str, dict[int, RankLine]]:
    by_case: dict[str, dict[int, RankLine]] = {}
    for path in run_dir.rank_line_files():
        for line in read_rank_lines(path, warnings):
            by_case.setdefault(line.case, {})[line.rank] = line
    return by_case


def unfinished_case(planned: PlannedCase, lines: Mapping[int, RankLine]) -> CaseResult:
    """A case the run stopped before every rank reported it: `not_run`, with what each rank that did report said."""
    by_rank = [lines.get(rank) for rank in range(planned.world_size)]
    judged = judge.unfinished(planned, by_rank)
    ranks = tuple(
        RankSummary(
            rank=rank,
            outcome=judgement.outcome.value,
            stage=line.stage if line is not None else "unknown",
            reason=judgement.reason,
        )
        for rank, (line, judgement) in enumerate(zip(by_rank, judged.ranks, strict=True))
    )
    return CaseResult(
        probe=planned.probe,
        case=planned.case,
        scenario=planned.scenario,
        level=planned.level,
        world_size=planned.world_size,
        device_kind=planned.device_kind,
        outcome=judged.outcome,
        duration_s=0.0,
        reason=judged.reason,
        ranks=ranks,
        notes={"unfinished": True},
        node=planned.node,
        nodes=planned.nodes,
    )


def stack_results(
    manifest: Manifest,
    run_dir: RunDir,
    versions: Mapping[str, Any],
    warnings: list[str],
    stack: str | None = None,
) -> list[CaseResult]:
    """Every planned case and skip of one stack (None: the installed one), from its rank lines, as `run` merged them
    (known issues judged on that stack's versions); a case that never finished, on a stack never reached too, is
    marked."""
    by_case = lines_by_case(run_dir, warnings)
    results = []
    for planned in manifest.planned:
        lines = by_case.get(planned.case, {})
        finished = len(lines) == planned.world_size
        results.append(
            merge_case(planned, list(lines.values()), versions)
            if finished
            else unfinished_case(planned, lines)
        )
    results += [skipped_case(skip) for skip in manifest.skips]
    return [dataclasses.replace(result, stack=stack) for result in results] if stack is not None else results


def run_stop(results: list[CaseResult], planned: int, signal: str | None) -> RunStop | None:
    """How far a run got: of the `planned` cases it was to run (every stack's), those that finished; None for a run
    that finished every one and was stopped by no signal (`signal`: the one that stopped it, where it said)."""
    not_run = sum(result.outcome == Outcome.NOT_RUN for result in results)
    if signal is None and not not_run:
        return None
    return RunStop(signal, planned - not_run, planned)


def report_from_run_dir(
    path: Path, *, anonymized: bool = False, stopped_by: str | None = None
) -> tuple[Report, list[str]]:
    """Rebuild the report of a run from its directory, the cases on each `--with` overlay included; returns the
    report and the warnings. `stopped_by`: the signal that stopped the run (else the one it recorded, if any)."""
    run_dir = RunDir(path)
    manifest = load_manifest(run_dir)
    warnings: list[str] = []
    versions = manifest.env.get("packages", {})
    results = stack_results(manifest, run_dir, versions, warnings)
    # a name twice (a manifest is data) counts once
    stacks = tuple({s["name"]: s for s in manifest.stacks}.values())
    for stack in stacks:
        if stack["name"] != "installed":
            results += stack_results(
                manifest,
                run_dir.stack(stack["name"]),
                {**versions, **stack.get("packages", {})},
                warnings,
                stack["name"],
            )
    stopped = run_stop(
        results,
        len(manifest.planned) * (1 + sum(s["name"] != "installed" for s in stacks)),
        stopped_by or run_dir.read_stop(),
    )
    results = (
        run_node_checks(manifest.env, manifest.hardware, manifest.keyword) + results
    )  # as `run` puts them
    report = build_report(
        started=parse_time(manifest.started_at),
        finished=run_dir.last_write(parse_time(manifest.started_at)),
        level=manifest.level,
        argv=manifest.argv,
        env=manifest.env,
        hardware=manifest.hardware,
        results=results,
        run_dir=path,
        anonymized=anonymized,
        stacks=stacks,
        stopped=stopped,
    )
    # a run directory is data as a report file is (the manifest's sections, the rank lines): its report is held to
    # the same schema, as the JSON the report is written as, before any reader computes with a value of it
    check_report(finite_json(report.to_dict()), str(path), InputError)
    return report, warnings


#: A result's parts that no summary reader (fleet, diff, a run's --baseline) reads or shows: the bulk of a report
#: (device maps, each rank's stages and stacks, series, notes, the known issue's remedy text, findings' evidence).
#: A summary read drops them before it checks or scrubs anything: a 430 KB level-2 report is then 30 KB of work.
_BULK: dict[str, Any] = {
    "device_map": [],
    "ranks": [],
    "series": [],
    "notes": {},
    "shown_notes": [],
    "known_issue": None,
}
_FINDING_BULK: dict[str, Any] = {"evidence": [], "data": {}, "remedy": None, "expected": None}


def summary_of(data: Any) -> Any:
    """`data` (parsed, unchecked) without the parts `_BULK` names, in place; a value of a wrong shape is left for the
    schema to name."""
    results = data.get("results") if isinstance(data, dict) else None
    for result in results if isinstance(results, list) else ():
        if not isinstance(result, dict):
            continue
        for key, empty in _BULK.items():
            if key in result:
                result[key] = type(empty)() if empty is not None else None
        findings = result.get("findings")
        for finding in findings if isinstance(findings, list) else ():
            if isinstance(finding, dict):
                for key, empty in _FINDING_BULK.items():
                    if key in finding:
                        finding[key] = type(empty)() if empty is not None else None
    return data


def _check_times(data: Mapping[str, Any], path: Path) -> None:
    """The report's times, which its schema holds to a time's shape only: one that still does not parse (month 13,
    hour 25) is one line naming it, before any reader subtracts or sorts them."""
    for key in ("started_at", "finished_at"):
        try:
            parse_time(data[key])
        except _CONVERSION:
            raise InputError(
                f"{path}: not a valid ds-doctor report at {key}: {short(data[key])} is not a time "
                f"(ISO 8601, as {TIME_EXAMPLE})"
            ) from None


def load_report_file(path: Path, *, anonymized: bool = False, summary: bool = False) -> Report:
    """A report JSON, checked: empty, malformed, another schema and a newer schema are input errors. `summary`:
    without what `summary_of` drops (for readers of outcomes, measures and versions), which is never checked,
    scrubbed or held."""
    data = _read_json(path, summary=summary)
    tool = data.get("tool") if isinstance(data, dict) else None
    if not isinstance(tool, dict) or tool.get("name") != "ds-doctor":
        raise InputError(f"{path}: not a ds-doctor report")
    check_report(data, str(path), InputError)
    _check_times(data, path)
    try:
        data = scrub(data)  # a report written by an older ds-doctor may predate a pattern
        if anonymized:
            data = anonymize(data, str(data["hardware"].get("host") or ""))
        report = Report.from_dict(data)
    except _CONVERSION as exc:
        raise InputError(
            f"{path}: not a valid ds-doctor report ({type(exc).__name__}: {exc})"[:300]
        ) from None
    for result in report.results:  # a world size is a count a reader may size things by
        check_world_size(result.world_size, f"{path}: {short(result.key)} has world size", InputError)
    return report

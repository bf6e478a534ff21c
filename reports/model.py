"""The plain data every layer shares: device-map records, findings, outcomes, measures, case results, the report.

Nothing here is live and nothing here imports more than the standard library, so renderers (this package)
can read a report without the engine, torch or the probe registry. The engine (`doctor/`) builds these
objects; `Report.from_dict(scrub(...))` is the only way a report is made from run data
(`ds_doctor.run.build.build_report`), so every renderer sees already-redacted strings.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import json
import math
import reprlib
import sys
from collections.abc import Callable, Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from ds_doctor.reports.compat import legacy_shown_notes, measures_from_v1_notes
from ds_doctor.reports.hang import (
    CollectivePosition,
    StageTime,
    ThreadStack,
    positions_from,
    stacks_from,
    stages_from,
)
from ds_doctor.reports.measures import MEASURES
from ds_doctor.reports.sections import EnvSection, HardwareSection, NodeSection, StackSection, section

if TYPE_CHECKING:
    import jsonschema

#: Version 2 added each result's `measures` and `series` (version 1 kept them in `notes`; still read).
SCHEMA_VERSION = 2


class Outcome(str, enum.Enum):
    """How one case ended. `xfail`/`xpass` only for cases that reproduce a known issue on purpose; `not_run` only
    for a case the run never finished (it was stopped, or its doctor killed): it says nothing of the stack."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    SKIP = "skip"
    TIMEOUT = "timeout"
    XFAIL = "xfail"
    XPASS = "xpass"
    NOT_RUN = "not_run"

    @property
    def label(self) -> str:
        """The outcome as a person reads it (`not run`); `value` is how the JSON, labels and classes spell it."""
        return self.value.replace("_", " ")


#: Outcomes that make a run unhealthy (exit code 1).
FAILING = frozenset({Outcome.FAIL, Outcome.ERROR, Outcome.TIMEOUT})

#: When ranks disagree, the case takes the first of these that any rank reported.
OUTCOME_ORDER = (
    Outcome.ERROR,
    Outcome.TIMEOUT,
    Outcome.FAIL,
    Outcome.XFAIL,
    Outcome.XPASS,
    Outcome.PASS,
    Outcome.SKIP,
    Outcome.NOT_RUN,
)


def worst(outcomes: list[Outcome]) -> Outcome:
    """The outcome a multi-rank case gets from its ranks' outcomes."""
    for candidate in OUTCOME_ORDER:
        if candidate in outcomes:
            return candidate
    raise ValueError("no outcomes to merge")


class ExitCode(enum.IntEnum):
    OK = 0
    CASES_FAILED = 1
    USAGE_ERROR = 2
    INTERNAL_ERROR = 3


class Severity(str, enum.Enum):
    """How much a finding matters: `error` breaks the case (`fail`, or `xfail` on a reproduce path)."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Verdict(str, enum.Enum):
    """Whether this stack is affected by a known issue. `reproduced`: a case reproduced a library's trap on purpose
    and it behaved as designed (a misuse that breaks on every release, or one outside its affected range): a fact
    about the library, never said of the reader's stack."""

    AFFECTED = "affected"
    NOT_AFFECTED = "not_affected"
    UNKNOWN = "unknown"
    REPRODUCED = "reproduced"
    #: an error matched only an entry's generic words (a signal, "unhandled system error") and none of the evidence
    #: that tells its cause apart: a guess to confirm (`IssueRef.confirm` says how), as `ds-doctor triage` says it
    POSSIBLY = "possibly"


#: A time as `format_time` writes it: the form an error about a report's time shows
TIME_EXAMPLE = "2026-11-21T12:00:00Z"


def format_time(moment: dt.datetime) -> str:
    """A report's times: ISO 8601 in UTC, to the second (`2026-11-22T20:43:52Z`)."""
    return moment.astimezone(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def parse_time(text: str) -> dt.datetime:
    """A report's time, always with a zone: `Z` read as UTC (Python 3.10's `fromisoformat` does not take it), and a
    time written without a zone taken as UTC too, as `format_time` would have written it, so that any two times of
    any reports subtract and compare (a naive and an aware datetime do neither)."""
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of `data` that are fields of the dataclass `cls` (newer writers may add fields)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclasses.dataclass(frozen=True)
class TensorRecord:
    """One tensor (or scalar operand) at one stage on one rank: a row of a device map."""

    rank: int
    stage: str
    role: str
    path: str
    owner: str | None
    device: str
    dtype: str
    shape: tuple[int, ...]
    numel: int
    nbytes: int
    requires_grad: bool | None = None
    # the node of a multi-node run the rank ran on (the report's `nodes` give its host)
    node: int | None = None
    aliases: tuple[str, ...] = ()  # the tensor's other names (a tied weight): one record, every name

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "shape": list(self.shape), "aliases": list(self.aliases)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TensorRecord:
        values = _known(cls, data)
        return cls(
            **{**values, "shape": tuple(values.get("shape", ())), "aliases": tuple(values.get("aliases", ()))}
        )

    @property
    def names(self) -> tuple[str, ...]:
        return (self.path, *self.aliases)

    @property
    def is_cpu_scalar(self) -> bool:
        """A 0-dim CPU tensor or a Python number: torch lets these mix with any device."""
        return self.device == "python" or (self.device == "cpu" and len(self.shape) == 0)


@dataclasses.dataclass(frozen=True)
class Finding:
    """A broken (or doubtful) invariant, with the records that show it."""

    invariant: str
    severity: Severity
    message: str
    rank: int | None = None
    stage: str | None = None
    expected: str | None = None
    evidence: tuple[TensorRecord, ...] = ()
    remedy: str | None = None
    node: int | None = None  # as TensorRecord.node
    # what the message says, as fields a reader compares (diff, fleet, tests): JSON-able, e.g. the equivalence
    # family's step, stage, quantity, relative error and tolerance; a hang's rank, group, sequence and collective
    data: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "severity", Severity(self.severity))

    @property
    def is_error(self) -> bool:
        return self.severity == Severity.ERROR

    def to_dict(self) -> dict[str, Any]:
        return {
            "invariant": self.invariant,
            "severity": self.severity.value,
            "message": self.message,
            "rank": self.rank,
            "stage": self.stage,
            "expected": self.expected,
            "evidence": [r.to_dict() for r in self.evidence],
            "remedy": self.remedy,
            "node": self.node,
            **({"data": dict(self.data)} if self.data else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        values = _known(cls, data)
        return cls(
            **{**values, "evidence": tuple(TensorRecord.from_dict(r) for r in data.get("evidence", []))}
        )


TRACEBACK_CHARS = 8000  # what a report keeps of a traceback


@dataclasses.dataclass(frozen=True)
class ErrorInfo:
    """An exception as a report keeps it: its type, its message and the tail of its traceback."""

    type: str
    message: str
    traceback: str

    @classmethod
    def of(cls, exc: BaseException) -> ErrorInfo:
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(type(exc).__name__, str(exc), text[-TRACEBACK_CHARS:])

    @property
    def summary(self) -> str:
        """`ValueError: the whole message`."""
        return f"{self.type}: {self.message}"

    @property
    def headline(self) -> str:
        """`ValueError: its first line`, at most 300 characters of it."""
        return f"{self.type}: {(self.message.splitlines() or [''])[0][:300]}"


#: how a text matched a known issue (`ds_doctor.knowledge.structure.Kind`), as every format says it
MATCH_SAID = {
    "wording": "its message",
    "loose": "its message, letter case and quotes aside",
    "cut": "a distinctive part of its message, where the text is cut (its end, or its start)",
    "frame": "the function that raises it and the exception type, not its message's words",
    "banner": "what is printed before it (a warning, a failed build's lines), without the error itself",
    "paraphrase": "the words people name it with, not its message",
}


@dataclasses.dataclass(frozen=True)
class IssueRef:
    """A known issue as a case result (or a triage match) names it, with this stack's verdict."""

    id: str
    title: str
    verdict: Verdict
    affected_versions: str
    remedy: str
    refs: tuple[str, ...] = ()
    fixed_in: str | None = None
    confirm: str | None = None  # a `possibly` verdict: what would confirm it
    match: str | None = None  # how an error text matched it (`MATCH_SAID`); None where no text was matched

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", Verdict(self.verdict))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "verdict": self.verdict.value,
            "affected_versions": self.affected_versions,
            "fixed_in": self.fixed_in,
            "remedy": self.remedy,
            "refs": list(self.refs),
            **({"confirm": self.confirm} if self.confirm else {}),
            **({"match": self.match} if self.match else {}),
        }

    @property
    def matched_by(self) -> str | None:
        """How its error text matched it, in words."""
        return MATCH_SAID.get(self.match) if self.match else None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IssueRef:
        values = _known(cls, {"title": "", "affected_versions": "", **data})
        return cls(**{**values, "refs": tuple(data.get("refs") or ())})


@dataclasses.dataclass(frozen=True)
class RankSummary:
    """What one rank said about a case (or what the parent knows of a rank that said nothing)."""

    rank: int
    outcome: str
    stage: str | None = None
    reason: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    stderr_tail: str | None = None
    traceback: str | None = None
    node: int | None = None  # a multi-node run's node of this rank
    stacks: tuple[ThreadStack, ...] = ()  # a hung rank's threads, taken before the launch was killed
    collectives: tuple[CollectivePosition, ...] = ()  # ...and where it stood in each process group
    native_stack: str | None = None  # py-spy's dump with native frames, where py-spy is installed
    stages: tuple[StageTime, ...] = ()  # time per stage of the case on this rank

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        return {
            **data,
            "stacks": [s.to_dict() for s in self.stacks],
            "collectives": list(data["collectives"]),
            "stages": list(data["stages"]),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RankSummary:
        return cls(
            **{
                **_known(cls, data),
                "stacks": stacks_from(data.get("stacks")),
                "collectives": positions_from(data.get("collectives")),
                "stages": stages_from(data.get("stages")),
            }
        )


@dataclasses.dataclass(frozen=True)
class CaseResult:
    probe: str
    case: str
    scenario: str
    level: int
    world_size: int
    device_kind: str
    outcome: Outcome
    duration_s: float
    reason: str | None = None
    known_issue: IssueRef | None = None
    findings: tuple[Finding, ...] = ()
    device_map: tuple[TensorRecord, ...] = ()
    ranks: tuple[RankSummary, ...] = ()
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)
    measures: dict[str, float | None] = dataclasses.field(default_factory=dict)  # names from MEASURES
    series: tuple[dict[str, float], ...] = ()  # rows of measures, e.g. one per message size
    node: int | None = None  # multi-node runs: the node a single-node case ran on (None: across the nodes)
    nodes: int = 1  # how many nodes the case's ranks spanned
    stack: str | None = None  # `run --with`: the overlay stack the case ran on (None: the stack as installed)
    shared_gpu: str | None = None  # its ranks shared GPUs, and how (never a node's interconnect figure)
    shown_notes: tuple[str, ...] = ()  # the notes its probe marked for a reader (`ctx.note(..., shown=True)`)

    @property
    def key(self) -> str:
        """The case id, unique within a report: a multi-node run's case inside a node adds `@node<N>`, a case on
        an overlay stack (`run --with`) `@<the stack>`."""
        key = self.case if self.node is None else f"{self.case}@node{self.node}"
        return key if self.stack is None else f"{key}@{self.stack}"

    @property
    def label(self) -> str:
        """The case id with its overlay stack, for where the node is shown apart (a table's own column)."""
        return self.case if self.stack is None else f"{self.case}@{self.stack}"

    def applicable_measures(self) -> dict[str, float | None]:
        """The measures that mean something at this case's world size."""
        return {
            k: v for k, v in self.measures.items() if k in MEASURES and MEASURES[k].applies(self.world_size)
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "case": self.case,
            "scenario": self.scenario,
            "level": self.level,
            "world_size": self.world_size,
            "device_kind": self.device_kind,
            "outcome": self.outcome.value,
            "duration_s": self.duration_s,
            "reason": self.reason,
            "known_issue": self.known_issue.to_dict() if self.known_issue else None,
            "findings": [f.to_dict() for f in self.findings],
            "device_map": [r.to_dict() for r in self.device_map],
            "ranks": [r.to_dict() for r in self.ranks],
            "notes": self.notes,
            "measures": self.measures,
            # a row keeps its finite numbers only (the schema's rows hold numbers; JSON has no NaN)
            "series": [{k: v for k, v in row.items() if _is_finite(v)} for row in self.series],
            "node": self.node,
            "nodes": self.nodes,
            "shown_notes": list(self.shown_notes),
            **{k: v for k, v in (("stack", self.stack), ("shared_gpu", self.shared_gpu)) if v is not None},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaseResult:
        notes = dict(data.get("notes") or {})
        measures, series = data.get("measures"), data.get("series")
        if measures is None:  # schema version 1 kept them in the notes, which no schema types
            measures, series, notes = measures_from_v1_notes(notes)
            measures = {k: v for k, v in measures.items() if _is_number(v)}
            series = [{k: v for k, v in row.items() if _is_number(v)} for row in series]
        issue = data.get("known_issue")
        return cls(
            probe=data["probe"],
            case=data["case"],
            scenario=data["scenario"],
            level=int(data["level"]),
            world_size=int(data["world_size"]),
            device_kind=data["device_kind"],
            outcome=Outcome(data["outcome"]),
            duration_s=float(data["duration_s"]),
            reason=data.get("reason"),
            known_issue=IssueRef.from_dict(issue) if issue else None,
            findings=tuple(Finding.from_dict(f) for f in data.get("findings", [])),
            device_map=tuple(TensorRecord.from_dict(r) for r in data.get("device_map", [])),
            ranks=tuple(RankSummary.from_dict(r) for r in data.get("ranks", [])),
            notes=notes,
            measures=dict(measures),
            series=tuple(dict(row) for row in series or ()),
            node=data.get("node"),
            nodes=int(data.get("nodes") or 1),
            shown_notes=tuple(str(k) for k in data["shown_notes"] if k in notes)
            if "shown_notes" in data
            else legacy_shown_notes(notes),
            **{k: str(data[k]) for k in ("stack", "shared_gpu") if data.get(k) is not None},
        )


@dataclasses.dataclass(frozen=True)
class RunStop:
    """A run that ended before its last case: the signal that stopped it (`SIGTERM`; None where the doctor ended
    without a chance to say, killed), and how many of the cases it planned to run had finished. The cases it never
    finished are `not_run` in the report."""

    signal: str | None
    finished: int
    planned: int

    @property
    def not_run(self) -> int:
        return max(self.planned - self.finished, 0)

    @property
    def headline(self) -> str:
        """What every format says first: `Stopped by SIGTERM after 12 of 47 cases: 35 not run`."""
        how = (
            f"Stopped by {self.signal}"
            if self.signal
            else "Did not finish (the run ended without writing its report)"
        )
        return f"{how} after {self.finished} of {self.planned} cases: {self.not_run} not run"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunStop:
        signal = data.get("signal")
        return cls(None if signal is None else str(signal), int(data["finished"]), int(data["planned"]))


@dataclasses.dataclass(frozen=True)
class Report:
    tool: dict[str, str]
    started_at: str
    finished_at: str
    command: list[str]
    level: int
    env: EnvSection
    hardware: HardwareSection
    results: tuple[CaseResult, ...]
    run_dir: str | None = None
    schema_version: int = SCHEMA_VERSION
    nodes: tuple[NodeSection, ...] = ()  # multi-node runs: each node's rank, host, env and hardware sections
    stacks: tuple[StackSection, ...] = ()  # `run --with`: each overlay stack's name, releases and packages
    stopped: RunStop | None = None  # a run stopped by a signal (or killed) before its last case

    def __post_init__(self) -> None:
        """Sections handed over as their dicts (a report's JSON, the engine's collection, a test) become typed."""
        object.__setattr__(self, "env", section(EnvSection, self.env))
        object.__setattr__(self, "hardware", section(HardwareSection, self.hardware))
        object.__setattr__(self, "nodes", tuple(section(NodeSection, n) for n in self.nodes))
        object.__setattr__(self, "stacks", tuple(section(StackSection, s) for s in self.stacks))

    @property
    def summary(self) -> dict[str, int]:
        counts = {outcome.value: 0 for outcome in Outcome}
        for result in self.results:
            counts[result.outcome.value] += 1
        return counts

    @property
    def affecting_issues(self) -> list[dict[str, Any]]:
        """Known issues with an `affected` verdict somewhere in this run, once each, with their cases."""
        seen: dict[str, dict[str, Any]] = {}
        for result in self.results:
            issue = result.known_issue
            if issue and issue.verdict == Verdict.AFFECTED:
                seen.setdefault(issue.id, {**issue.to_dict(), "cases": []})["cases"].append(result.label)
        return list(seen.values())

    @property
    def library_traps(self) -> dict[str, dict[str, list[str]]]:
        """The reproductions run on purpose, apart from this stack: by known issue, the cases that showed its trap
        as designed (`reproduced`) and those where it did not show at these versions (`absent`)."""
        traps: dict[str, dict[str, list[str]]] = {"reproduced": {}, "absent": {}}
        for result in self.results:
            issue = result.known_issue
            if issue is None:
                continue
            if issue.verdict == Verdict.REPRODUCED:
                traps["reproduced"].setdefault(issue.id, []).append(result.label)
            elif result.outcome == Outcome.XPASS and issue.verdict == Verdict.NOT_AFFECTED:
                traps["absent"].setdefault(issue.id, []).append(result.label)
        return traps

    @property
    def library_trap_counts(self) -> tuple[int, int]:
        """(cases that reproduced a trap as designed, cases that found one absent at these versions)."""
        traps = self.library_traps
        return sum(map(len, traps["reproduced"].values())), sum(map(len, traps["absent"].values()))

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.CASES_FAILED if any(r.outcome in FAILING for r in self.results) else ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": self.tool,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "command": self.command,
            "level": self.level,
            "run_dir": self.run_dir,
            "env": self.env.to_dict(),
            "hardware": self.hardware.to_dict(),
            "results": [r.to_dict() for r in self.results],
            "summary": self.summary,
            "affecting_issues": self.affecting_issues,
            "nodes": [n.to_dict() for n in self.nodes],
            **({"stacks": [s.to_dict() for s in self.stacks]} if self.stacks else {}),
            **({"stopped": self.stopped.to_dict()} if self.stopped else {}),
        }

    def to_json(self) -> str:
        """Strict JSON (jq, JavaScript and Go refuse `NaN` and `Infinity`): a non-finite number anywhere is null."""
        return json.dumps(finite_json(self.to_dict()), indent=2, sort_keys=False, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        return cls(
            schema_version=int(data["schema_version"]),
            tool=dict(data["tool"]),
            started_at=data["started_at"],
            finished_at=data["finished_at"],
            command=list(data.get("command", [])),
            level=int(data.get("level", 2)),
            run_dir=data.get("run_dir"),
            env=section(EnvSection, data["env"]),
            hardware=section(HardwareSection, data["hardware"]),
            results=tuple(CaseResult.from_dict(r) for r in data["results"]),
            nodes=tuple(NodeSection.from_dict(n) for n in data.get("nodes") or ()),
            stacks=tuple(StackSection.from_dict(s) for s in data.get("stacks") or ()),
            stopped=RunStop.from_dict(data["stopped"]) if data.get("stopped") else None,
        )

    def where(self, result: CaseResult) -> str:
        """Where a case ran, in a multi-node report: `node 1 (host)`, or `all nodes`; "" on one node."""
        if not self.nodes:
            return ""
        return "all nodes" if result.node is None else f"node {result.node} ({self.host_of(result.node)})"

    def host_of(self, node: int | None) -> str:
        """The host a node ran on (this report's host on a single-node run)."""
        for entry in self.nodes:
            if entry.node == node:
                return entry.host
        return str(self.hardware.host)


def load_schema(version: int = SCHEMA_VERSION) -> dict[str, Any]:
    """The JSON Schema of a report of `version` (every version this ds-doctor reads is kept)."""
    name = "schema.json" if version == SCHEMA_VERSION else f"schema-v{version}.json"
    return json.loads(resources.files("ds_doctor.reports").joinpath(name).read_text())


@functools.cache
def _validator(version: int) -> Any:
    """The schema of `version`, checked and compiled once per process: `jsonschema.validate` re-read, re-checked
    and re-built it for every report (a third of a report's reading time, issue 46)."""
    import jsonschema

    schema = load_schema(version)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


@functools.cache
def _compiled(version: int) -> Callable[[Any], Any]:
    """The schema of `version` compiled to Python code (fastjsonschema): 15 times faster than `jsonschema` on a
    report. Formats are not checked, as `jsonschema` does not by default; the schemas use only keywords both read
    alike (tests/reports/test_validate.py holds the two to the same verdicts)."""
    import fastjsonschema

    return fastjsonschema.compile(load_schema(version), use_formats=False)


def validate(data: Mapping[str, Any]) -> None:
    """Raise `jsonschema.ValidationError` if `data` is not a valid report of its own schema version (the error
    `jsonschema.validate` raises: the most relevant one). The compiled schema passes a valid report; what it
    rejects `jsonschema` judges and words."""
    import fastjsonschema
    import jsonschema

    version = data.get("schema_version")
    # `True in (1, 2)` holds: a bool is no version (its schema then says so)
    version = version if type(version) is int and version in (1, SCHEMA_VERSION) else SCHEMA_VERSION
    try:
        _compiled(version)(data)
        return
    except fastjsonschema.JsonSchemaException:
        pass
    error = jsonschema.exceptions.best_match(_validator(version).iter_errors(data))
    if error is not None:
        error.message = _worded(error)
        raise error


QUOTED_CHARS = 60  # of a value an error message quotes


def _worded(error: jsonschema.ValidationError) -> str:
    """`error`'s message with the value it quotes cut short: `jsonschema` quotes the whole value, and an integer of
    hundreds of digits or a long string would fill the one line a reader gets before it says what is wrong. A time's
    pattern is said in words, not quoted."""
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "pattern" and schema.get("format") == "date-time":
        return f"{_brief(error.instance)} is not a time (ISO 8601, as {TIME_EXAMPLE})"
    said = repr(error.instance)
    if len(said) <= QUOTED_CHARS or not error.message.startswith(said):
        return str(error.message)
    return _brief(error.instance) + error.message[len(said) :]


def _brief(value: Any) -> str:
    """A value as an error message quotes it: an integer beyond a float's range by its size, anything else by a
    short repr."""
    if type(value) is int and value.bit_length() > 64:
        return f"an integer of {value.bit_length():,} bits"
    brief = reprlib.Repr()
    brief.maxlevel, brief.maxstring, brief.maxother = 2, QUOTED_CHARS, QUOTED_CHARS
    brief.maxlist = brief.maxdict = 4
    return brief.repr(value)


def _is_number(value: Any) -> bool:
    """A JSON number a reader can compute with: no bool, and no integer beyond a float's range (JSON writes 1e400 as
    an integer, which `float()` refuses)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return not isinstance(value, int) or abs(value) <= sys.float_info.max


def _is_finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def finite_json(value: Any) -> Any:
    """`value` with every non-finite float (NaN, ±inf, from a probe's numbers or a report read back) made None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(item) for item in value]
    return value

"""The report: plain data with a schema version. Renderers read it; nothing in it is live.

`Report.from_dict(scrub(...))` is the only way a report is built from run data (see
`doctor.runner.build_report`), so every renderer sees already-redacted strings.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from doctor.devicemap import TensorRecord
from doctor.invariants import Finding
from doctor.outcomes import Outcome

SCHEMA_VERSION = 1


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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RankSummary:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in fields})


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
    known_issue: dict[str, Any] | None = None
    findings: tuple[Finding, ...] = ()
    device_map: tuple[TensorRecord, ...] = ()
    ranks: tuple[RankSummary, ...] = ()
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)

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
            "known_issue": self.known_issue,
            "findings": [f.to_dict() for f in self.findings],
            "device_map": [r.to_dict() for r in self.device_map],
            "ranks": [r.to_dict() for r in self.ranks],
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaseResult:
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
            known_issue=data.get("known_issue"),
            findings=tuple(Finding.from_dict(f) for f in data.get("findings", [])),
            device_map=tuple(TensorRecord.from_dict(r) for r in data.get("device_map", [])),
            ranks=tuple(RankSummary.from_dict(r) for r in data.get("ranks", [])),
            notes=dict(data.get("notes") or {}),
        )


@dataclasses.dataclass(frozen=True)
class Report:
    tool: dict[str, str]
    started_at: str
    finished_at: str
    command: list[str]
    level: int
    env: dict[str, Any]
    hardware: dict[str, Any]
    results: tuple[CaseResult, ...]
    run_dir: str | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def summary(self) -> dict[str, int]:
        counts = {outcome.value: 0 for outcome in Outcome}
        for result in self.results:
            counts[result.outcome.value] += 1
        return counts

    @property
    def affecting_issues(self) -> list[dict[str, Any]]:
        """Known issues with an `affected` verdict somewhere in this run, once each."""
        seen: dict[str, dict[str, Any]] = {}
        for result in self.results:
            issue = result.known_issue
            if issue and issue.get("verdict") == "affected":
                seen.setdefault(issue["id"], {**issue, "cases": []})["cases"].append(result.case)
        return list(seen.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "command": self.command,
            "level": self.level,
            "run_dir": self.run_dir,
            "env": self.env,
            "hardware": self.hardware,
            "results": [r.to_dict() for r in self.results],
            "summary": self.summary,
            "affecting_issues": self.affecting_issues,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

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
            env=dict(data["env"]),
            hardware=dict(data["hardware"]),
            results=tuple(CaseResult.from_dict(r) for r in data["results"]),
        )


def load_schema() -> dict[str, Any]:
    return json.loads(resources.files("reports").joinpath("schema.json").read_text())


def validate(data: Mapping[str, Any]) -> None:
    """Raise `jsonschema.ValidationError` if `data` is not a valid report."""
    import jsonschema

    jsonschema.validate(instance=data, schema=load_schema())

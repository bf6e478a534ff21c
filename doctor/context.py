"""What a probe sees on one rank: its case, the rank's device, and places to put records and findings."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from doctor.devicemap import Recorder, TensorRecord, collect
from doctor.invariants import Finding
from probes.base import Requirement, missing_dependency


class SkipCase(Exception):
    """Raised by a probe when the case cannot run here; the reason is reported."""


class ProbeContext:
    def __init__(
        self,
        *,
        case_id: str,
        params: Mapping[str, Any],
        rank: int,
        world_size: int,
        local_rank: int,
        device: str,
        backend: str,
        heartbeat: Callable[[str], None] | None = None,
        scratch: Path | None = None,
    ) -> None:
        self.case_id = case_id
        self.params = params
        self.rank = rank
        self.world_size = world_size
        self.local_rank = local_rank
        self.device = device
        self.device_kind = device.split(":")[0]
        self.backend = backend
        self.stage = "start"
        self.records: list[TensorRecord] = []
        self.findings: list[Finding] = []
        self.notes: dict[str, Any] = {}
        self.shown: list[str] = []
        self.issue: dict[str, Any] | None = None
        self._heartbeat = heartbeat
        self._scratch = scratch

    def enter(self, stage: str) -> None:
        """Mark the stage the probe is in, so a hang is reported with it."""
        self.stage = stage
        if self._heartbeat is not None:
            self._heartbeat(stage)

    def snapshot(self, stage: str, *, module: Any = None, optimizer: Any = None, engine: Any = None) -> list[TensorRecord]:
        """Record the device map of what is given at `stage` (metadata only)."""
        self.enter(stage)
        records = collect(Recorder(self.rank, stage), module=module, optimizer=optimizer, engine=engine)
        self.records.extend(records)
        return records

    def add_records(self, records: Iterable[TensorRecord]) -> None:
        self.records.extend(records)

    def check(self, findings: Iterable[Finding]) -> None:
        """Keep findings, stamped with this rank where the invariant did not know it."""
        for finding in findings:
            if finding.rank is None:
                finding = dataclasses.replace(finding, rank=self.rank)
            self.findings.append(finding)

    def note(self, key: str, value: Any) -> None:
        """A JSON-able fact worth showing in the report (versions, norms, classes)."""
        self.notes[key] = value

    def skip(self, reason: str) -> None:
        raise SkipCase(reason)

    def require(self, *requirements: Requirement) -> None:
        """Skip this case, with the install lines, unless every requirement is installed."""
        reason = missing_dependency(requirements)
        if reason:
            self.skip(reason)

    def showed(self, what: str) -> None:
        """The failure a reproduce case is after showed for real (a raise, lost data, a parameter that
        stopped training). With no error finding caught before it, the case is a `fail`: the
        invariants missed it."""
        self.shown.append(what)
        self.notes.setdefault("showed", []).append(what)

    def known_issue(self, issue_id: str, *, shown: bool) -> None:
        """The known issue this case is about, and whether it showed here (verdict `affected`)."""
        self.issue = {"id": issue_id, "shown": shown}

    @property
    def has_error_findings(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    def scratch_dir(self) -> Path:
        """A directory for this case's files (checkpoints), the same path on every rank of the node."""
        if self._scratch is None:
            raise RuntimeError("this context has no scratch directory")
        path = self._scratch / re.sub(r"[^A-Za-z0-9_.+-]", "_", self.case_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

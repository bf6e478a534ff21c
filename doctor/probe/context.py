"""What a probe sees on one rank: its case, the rank's device, and places to put records and findings."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

from ds_doctor.collect.devicemap import Recorder, collect
from ds_doctor.probe.rankoptions import RankOptions
from ds_doctor.probe.spec import Requirement, missing_dependency
from ds_doctor.reports.hang import StageKind, StageTime
from ds_doctor.reports.measures import MEASURES
from ds_doctor.reports.model import Finding, TensorRecord


class SkipCase(Exception):
    """Raised by a probe when the case cannot run here; the reason is reported."""


class ProbeContext:
    # keyword-only: each of the rank's facts named where the worker builds it
    def __init__(  # noqa: PLR0913
        self,
        *,
        case_id: str,
        params: Any,
        rank: int,
        world_size: int,
        local_rank: int,
        device: str,
        backend: str,
        heartbeat: Callable[[str], None] | None = None,
        scratch: Path | None = None,
        options: RankOptions | None = None,
    ) -> None:
        self.case_id = case_id
        self.options = options or RankOptions()  # the run's options, as the launch directory holds them
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
        self.measures: dict[str, float | None] = {}
        self.series: list[dict[str, float]] = []
        self.shown: list[str] = []
        self.shown_notes: list[str] = []
        self.issue: tuple[str, bool] | None = None
        self.instead = False  # a reproduce case caught something other than its own issue (`reproduce`)
        self._heartbeat = heartbeat
        self._scratch = scratch
        # (stage, when, whose) for the stage times: the case's own, after its probe's setup where it ran here
        self._kind = StageKind.CASE
        self._entered: list[tuple[str, float, StageKind]] = [(self.stage, time.time(), self._kind)]

    def enter(self, stage: str) -> None:
        """Mark the stage the probe is in, so a hang is reported with it (and the time per stage is known)."""
        self.stage = stage
        if stage != self._entered[-1][0]:
            self._entered.append((stage, time.time(), self._kind))
        if self._heartbeat is not None:
            self._heartbeat(stage)

    @contextlib.contextmanager
    def setting_up(self) -> Iterator[None]:
        """The probe's one-off setup runs inside: the stages it enters ("load <Builder>") are setup stages, never
        judged for a straggler (`StageKind`)."""
        self._kind = StageKind.SETUP
        self.stage = "setup"
        self._entered = [(self.stage, time.time(), self._kind)]
        try:
            yield
        finally:
            self._kind = StageKind.CASE

    def restart_clock(self) -> None:
        """The case starts now, at its own stage "start" (never the last stage of a setup that ran before it, which
        keeps its stages, as `StageKind.SETUP`): stage times count from here."""
        now = time.time()
        setup = [entry for entry in self._entered if entry[2] == StageKind.SETUP]
        self.stage = "start"
        self._entered = [*setup, (self.stage, now, StageKind.CASE)]

    @property
    def has_user_model(self) -> bool:
        """Whether the run names a model (`--model`): a check that builds nothing."""
        return self.options.model is not None

    def user_model(self, seed: int = 0) -> Any:
        """The model `ds-doctor run --model` names (`ds_doctor.usersetup.model.Trainable`: module, batches, loss), built
        on this rank with `seed` (the same on every rank); None when the run has none and the probe uses its own."""
        from ds_doctor.usersetup import model as user_model

        spec = self.options.model_spec()
        return user_model.build(spec, self.world_size, seed) if spec is not None else None

    def stage_times(self) -> tuple[StageTime, ...]:
        """Each stage entered, with when it started (since the case did) and how long it lasted, up to now."""
        start = next((when for _, when, kind in self._entered if kind == StageKind.CASE), self._entered[0][1])
        ends = [when for _, when, _ in self._entered[1:]] + [time.time()]
        return tuple(
            StageTime(stage, round(when - start, 4), round(end - when, 4), kind, round(when, 4))
            for (stage, when, kind), end in zip(self._entered, ends, strict=True)
        )

    def snapshot(
        self, stage: str, *, module: Any = None, optimizer: Any = None, engine: Any = None
    ) -> list[TensorRecord]:
        """Record the device map of what is given at `stage` (metadata only)."""
        self.enter(stage)
        records = collect(Recorder(self.rank, stage), module=module, optimizer=optimizer, engine=engine)
        self.records.extend(records)
        return records

    def add_records(self, records: Iterable[TensorRecord]) -> None:
        self.records.extend(records)

    def add_findings(self, findings: Iterable[Finding]) -> None:
        """Add findings to the case's result, stamped with this rank where the invariant did not know it. It judges
        nothing itself: the invariants made the findings; an error among them fails the case."""
        for finding in findings:
            if finding.rank is None:
                finding = dataclasses.replace(finding, rank=self.rank)
            self.findings.append(finding)

    def check(self, findings: Iterable[Finding]) -> None:
        """Deprecated: `add_findings`, under the name the plugin API documented first (it checked nothing)."""
        warnings.warn(
            "ProbeContext.check(findings) is deprecated: call ctx.add_findings(findings)",
            DeprecationWarning,
            stacklevel=2,
        )
        self.add_findings(findings)

    def note(self, key: str, value: Any, *, shown: bool = False) -> None:
        """A JSON-able fact for the report (versions, norms, classes). `shown`: the ticket's Markdown shows it in
        the case's section (renderers never know a probe's keys: the probe marks what a reader should see)."""
        self.notes[key] = value
        if shown and key not in self.shown_notes:
            self.shown_notes.append(key)

    def measure(self, name: str, value: float | None) -> None:
        """A headline number of the case (the measure registry, `ds_doctor.reports.measures.MEASURES`, names it and
        gives its unit; a probe's own is declared with `register_measure`)."""
        self.measures[_measure_name(name)] = value

    def measure_row(self, **values: float) -> None:
        """One row of measures, e.g. one message size of a collective."""
        self.series.append({_measure_name(name): value for name, value in values.items()})

    def all_gather_json(self, value: Any) -> list[Any]:
        """Every rank's `value` (JSON-able), in rank order. Use this, not `all_gather_object`: torch's object
        collectives decode through numpy, which a node may lack ("RuntimeError: Numpy is not available")."""
        return all_gather_json(value, self.device)

    def skip(self, reason: str) -> NoReturn:
        raise SkipCase(reason)

    def require(self, *requirements: Requirement) -> None:
        """Skip this case, with the install lines, unless every requirement is installed."""
        reason = missing_dependency(requirements)
        if reason:
            self.skip(reason)

    def reproduce(
        self, issue_id: str | None, *, showed: Iterable[str] = (), caught: bool = False, instead: bool = False
    ) -> None:
        """What a case found of a known issue, in one call; the judge in the parent makes it the outcome.

        `issue_id`: the known issue the case is about (None: none to name). `showed`: what went wrong for real (a
        raise, lost data, a parameter that stopped training): a reproduce case where it showed and no error finding
        caught it is a `fail` (the invariants missed it); one where nothing showed and nothing was caught is an
        `xpass`. `caught`: the invariants caught the issue here. Either makes the issue shown here (verdict
        `affected`). `instead`: what the invariants caught is not the case's own issue, as the probe tells them
        apart: `issue_id` is the other known issue (`affected`), or None where nothing in the catalog explains it; the
        case is a `fail`, never an `xfail` of its own issue (which `make verify-catalog` records as reproduced).
        A second call names its issue, shown if either call saw it."""
        what = list(showed)
        self.shown.extend(what)
        if what:
            self.notes.setdefault("showed", []).extend(what)
        if instead:
            self.instead = True
            self.issue = (issue_id, True) if issue_id else None
        elif issue_id:
            before = self.issue is not None and self.issue[1]
            self.issue = (issue_id, before or bool(what) or caught)

    @property
    def has_error_findings(self) -> bool:
        return any(f.is_error for f in self.findings)

    def scratch_dir(self) -> Path:
        """A directory for this case's files (checkpoints), the same path on every rank of the node."""
        if self._scratch is None:
            raise RuntimeError("this context has no scratch directory")
        path = self._scratch / re.sub(r"[^A-Za-z0-9_.+-]", "_", self.case_id)
        path.mkdir(parents=True, exist_ok=True)
        return path


def _measure_name(name: str) -> str:
    if name not in MEASURES:
        raise KeyError(
            f"unknown measure {name!r}; known: {', '.join(MEASURES)} (declare a new one beside the probe's spec: "
            "register_measure(Measure(...)))"
        )
    return name


def all_gather_json(value: Any, device: str) -> list[Any]:
    """JSON through two tensor all_gathers (sizes, then padded bytes): no pickle, no numpy."""
    import json

    import torch
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [json.loads(json.dumps(value))]
    payload = json.dumps(value).encode()
    size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, size)
    data = torch.zeros(max(int(s) for s in sizes), dtype=torch.uint8, device=device)
    data[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    chunks = [torch.empty_like(data) for _ in sizes]
    dist.all_gather(chunks, data)
    return [json.loads(bytes(chunk[: int(n)].cpu().tolist())) for chunk, n in zip(chunks, sizes, strict=True)]

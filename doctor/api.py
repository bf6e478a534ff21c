"""The Python API: the same collectors and invariants, inside a user's own training job.

    from ds_doctor.api import watch, DoctorCallback
    w = watch(engine)                        # a DeepSpeed engine, right after deepspeed.initialize
    w = watch(accelerator)                   # an Accelerator, right after prepare
    trainer.add_callback(DoctorCallback())   # an HF Trainer
    # options: out="ds-doctor-watch.json", every=None | N (steps) | "auto", raise_on=None | "error", budget=0.02

    from ds_doctor.api import inspect           # one snapshot, placement only
    result = inspect(model, optimizer, engine=engine, stage="after_step")

Metadata only: nothing is copied or synced; a watch gathers findings (never tensors) once per moment.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ds_doctor.checks.placement import ZeroPromise, grad_accum_dtype
from ds_doctor.collect.devicemap import Recorder, collect_rows, dtype_name, tensor_record
from ds_doctor.files import write_atomic
from ds_doctor.redact import scrub
from ds_doctor.reports.model import Finding, TensorRecord
from ds_doctor.watch import fast
from ds_doctor.watch.hooks import Session, attach_accelerator, attach_engine
from ds_doctor.watch.target import Target, current_rank, engine_config, is_accelerator, is_deepspeed_engine
from ds_doctor.watch.watcher import DEFAULT_BUDGET, DoctorError, Watch, no_gc

__all__ = ["DoctorError", "Inspection", "Watch", "inspect", "watch"]


#: A row's metadata as `inspect` read it: (role, path, owner, aliases, device, dtype, shape, requires_grad).
_Frozen = tuple[str, Any, "str | None", tuple[str, ...], str, Any, Any, Any]


def _freeze(rec: Recorder) -> list[_Frozen | TensorRecord]:
    """The rows' metadata, read now: what their records will say, without the tensors (an inspection kept for
    later pins no gradient or optimizer state the job has let go, and describes the tensors as they were). A row
    of a Python number is made its record at once."""
    rows = rec.rows
    try:
        return [
            (role, path, owner, aliases, device, value.dtype, value.shape, value.requires_grad)
            for value, role, path, owner, aliases, device in rows
        ]
    except AttributeError:  # a Python number (device `python`) among them
        return [
            rec.record(row)
            if row[5] == "python"
            else (*row[1:], row[0].dtype, row[0].shape, row[0].requires_grad)
            for row in rows
        ]


def _thaw(frozen: _Frozen | TensorRecord, rank: int, stage: str) -> TensorRecord:
    """The record `Recorder.record` makes of a row, from the row's frozen metadata: numel is the product of the
    shape and nbytes numel times the dtype's item size, which is what `numel()` and `element_size()` return."""
    if isinstance(frozen, TensorRecord):
        return frozen
    *placed, dtype, size, requires_grad = frozen
    shape = tuple(size)
    numel = math.prod(shape)
    return tensor_record(
        (rank, stage),
        (placed[0], placed[1], placed[2], placed[3], placed[4]),
        dtype_name(dtype),
        shape,
        (numel, numel * _item_size(dtype)),
        bool(requires_grad),
    )


def _item_size(dtype: Any) -> int:
    size = getattr(dtype, "itemsize", None)  # torch >= 2.1
    if size is None:
        import torch

        size = torch.empty(0, dtype=dtype, device="meta").element_size()
    return int(size)


class Inspection:
    """What `inspect` saw: its findings, and the device map as records. `inspect` reads every tensor's metadata
    and judges the rows; the records (one object per tensor, which costs more than the whole inspection) are made
    on the first access to `records` (or `to_dict`, `write`) from that metadata, then kept. Read-only."""

    __slots__ = ("_findings", "_frozen", "_records")

    def __init__(self, records: Iterable[TensorRecord], findings: Iterable[Finding]) -> None:
        self._records = tuple(records)
        self._findings = tuple(findings)
        self._frozen: tuple[int, str, list[_Frozen | TensorRecord]] | None = None  # records still to make

    @classmethod
    def of_rows(cls, rec: Recorder, findings: Iterable[Finding]) -> Inspection:
        """An inspection of what `rec` collected: its rows' metadata read now, their records made when asked."""
        inspection = cls((), findings)
        inspection._frozen = (rec.rank, rec.stage, _freeze(rec))
        return inspection

    @property
    def records(self) -> tuple[TensorRecord, ...]:
        if self._frozen is not None:
            rank, stage, frozen = self._frozen
            self._records = tuple([_thaw(row, rank, stage) for row in frozen])
            self._frozen = None
        return self._records

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self._findings

    @property
    def ok(self) -> bool:
        return not any(f.is_error for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return scrub(
            {
                "device_map": [r.to_dict() for r in self.records],
                "findings": [f.to_dict() for f in self.findings],
            }
        )

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        write_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    # as the frozen dataclass it was: equal by records and findings, hashable, shown with both
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Inspection):
            return NotImplemented
        return (self.records, self.findings) == (other.records, other.findings)

    def __hash__(self) -> int:
        return hash((self.records, self.findings))

    def __repr__(self) -> str:
        return f"Inspection(records={self.records!r}, findings={self.findings!r})"


def watch(
    obj: Any,
    *,
    out: str | Path | None = "ds-doctor-watch.json",
    every: int | str | None = None,
    raise_on: str | None = None,
    device_maps: bool = False,
    budget: float = DEFAULT_BUDGET,
    table: str | Path | None = None,
) -> Watch:
    """Watch a DeepSpeed engine or an Accelerator (after initialize / prepare) at the moments S0-S4 bite.

    Runs the after_prepare checks now, then before each save, after each load, at the first optimizer step and
    every `every` steps: `every=N` exactly, `every="auto"` as far apart as keeps the watch's own time under
    `budget` (a share, 2 %) of the job's, None the first step only. Every rank must call it (each moment gathers
    once across ranks). `raise_on="error"` raises `DoctorError` on every rank at an error finding, before the save
    it guards. Rank 0 appends each moment to `<out's stem>.moments.jsonl` and writes the report `out` at once for a
    new kind of finding, else at most once a minute, and at close (None: log only); `device_maps` adds rank 0's
    device map to each moment; `table` (a folder) adds the last report's rows to the results table at close
    (`ds-doctor fleet` reads it; needs pyarrow). `close()` (or leaving a `with` block) puts back every method
    and hook it changed.
    """
    Watch.validate(
        out=out, every=every, raise_on=raise_on, device_maps=device_maps, budget=budget, table=table
    )
    if is_deepspeed_engine(obj):
        target = Target.of_engine(obj)
    elif is_accelerator(obj):
        target = Target.of_accelerator(obj)
    else:
        raise TypeError(
            f"watch() takes a DeepSpeed engine or an accelerate.Accelerator, not {type(obj).__name__}; "
            "for the HF Trainer add DoctorCallback() to it"
        )
    handle = Watch(
        target, out=out, every=every, raise_on=raise_on, device_maps=device_maps, budget=budget, table=table
    )
    session = Session(handle)
    if target.kind == "deepspeed":
        attach_engine(session, obj)
    else:
        attach_accelerator(session, obj)
    try:
        session.after_prepare()
    except BaseException:
        handle.close()  # a DoctorError here leaves the job as it was
        raise
    return handle


def __getattr__(name: str) -> Any:
    """`DoctorCallback` imports transformers: only when asked for."""
    if name == "DoctorCallback":
        from ds_doctor.watch.callback import DoctorCallback

        return DoctorCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def inspect(
    model: Any = None,
    optimizer: Any = None,
    *,
    engine: Any = None,
    stage: str = "inspect",
    config: Mapping[str, Any] | None = None,
    accelerator: str | None = None,
) -> Inspection:
    """Device map and findings for what is given.

    Optimizer tensors are always checked against their parameters' devices. With a DeepSpeed
    engine (or a ZeRO `config` and the rank's `accelerator` device), fp32 and parameter
    partitions are also checked against what the config promises.

    As in a watch, the invariants judge the collected rows and only the offenders (and their anchors) become
    records, with the findings a full device map gives; every tensor's metadata is read now and the records of
    the device map are made on the first access to `records` (bench/bench_collect.py).
    """
    rec = Recorder(current_rank(), stage)
    with no_gc():  # many small tuples, none of them garbage: a collection would walk the job's whole heap
        collect_rows(rec, module=model, optimizer=optimizer, engine=engine)
        findings = fast.colocation(rec)
        config = config if config is not None else (engine_config(engine) if engine is not None else None)
        if config is not None and "zero_optimization" in config:
            device = accelerator or (str(engine.device) if engine is not None else "cpu")
            promise = ZeroPromise.from_config(config, accelerator=device)
            findings += fast.zero_placement(rec, promise) + grad_accum_dtype(promise)
        return Inspection.of_rows(rec, findings)

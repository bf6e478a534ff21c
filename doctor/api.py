"""The Python API: the same collectors and invariants, inside a user's own training job.

    from ds_doctor.api import watch, DoctorCallback
    w = watch(engine)                        # a DeepSpeed engine, right after deepspeed.initialize
    w = watch(accelerator)                   # an Accelerator, right after prepare
    trainer.add_callback(DoctorCallback())   # an HF Trainer
    # options: out="ds-doctor-watch.json", every=None | N (steps), raise_on=None | "error"

    from ds_doctor.api import inspect           # one snapshot, placement only
    result = inspect(model, optimizer, engine=engine, stage="after_step")

Metadata only: nothing is copied or synced; a watch gathers findings (never tensors) once per moment.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ds_doctor.checks.placement import (
    ZeroPromise,
    fp32_partition_placement,
    grad_accum_dtype,
    optimizer_state_colocation,
    param_partition_placement,
)
from ds_doctor.collect.devicemap import Recorder, collect
from ds_doctor.files import write_atomic
from ds_doctor.redact import scrub
from ds_doctor.reports.records import Finding, TensorRecord
from ds_doctor.watch.hooks import Session, attach_accelerator, attach_engine
from ds_doctor.watch.target import Target, current_rank, engine_config, is_accelerator, is_deepspeed_engine
from ds_doctor.watch.watcher import DoctorError, Watch

__all__ = ["DoctorError", "Inspection", "Watch", "inspect", "watch"]


@dataclasses.dataclass(frozen=True)
class Inspection:
    records: tuple[TensorRecord, ...]
    findings: tuple[Finding, ...]

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


def watch(
    obj: Any,
    *,
    out: str | Path | None = "ds-doctor-watch.json",
    every: int | None = None,
    raise_on: str | None = None,
    device_maps: bool = False,
) -> Watch:
    """Watch a DeepSpeed engine or an Accelerator (after initialize / prepare) at the moments S0-S4 bite.

    Runs the after_prepare checks now, then before each save, after each load, at the first optimizer step and
    every `every` steps. Every rank must call it (each moment gathers once across ranks). `raise_on="error"`
    raises `DoctorError` on every rank at an error finding, before the save it guards. `out` is the report
    rank 0 rewrites at each moment (None: log only); `device_maps` adds rank 0's device map to each moment.
    `close()` (or leaving a `with` block) puts back every method and hook it changed.
    """
    Watch.validate(out=out, every=every, raise_on=raise_on, device_maps=device_maps)
    if is_deepspeed_engine(obj):
        target = Target.of_engine(obj)
    elif is_accelerator(obj):
        target = Target.of_accelerator(obj)
    else:
        raise TypeError(
            f"watch() takes a DeepSpeed engine or an accelerate.Accelerator, not {type(obj).__name__}; "
            "for the HF Trainer add DoctorCallback() to it"
        )
    handle = Watch(target, out=out, every=every, raise_on=raise_on, device_maps=device_maps)
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
    """
    records = collect(Recorder(current_rank(), stage), module=model, optimizer=optimizer, engine=engine)
    findings = optimizer_state_colocation(records)
    config = config if config is not None else (engine_config(engine) if engine is not None else None)
    if config is not None and "zero_optimization" in config:
        device = accelerator or (str(engine.device) if engine is not None else "cpu")
        promise = ZeroPromise.from_config(config, accelerator=device)
        findings += fp32_partition_placement(records, promise)
        findings += param_partition_placement(records, promise)
        findings += grad_accum_dtype(promise)
    return Inspection(tuple(records), tuple(findings))

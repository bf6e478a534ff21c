"""The Python API: the same collectors and invariants, inside a user's own training job.

    from doctor.api import inspect
    result = inspect(model, optimizer, engine=engine, stage="after_step")
    for finding in result.findings: print(finding.message)
    result.write("ds-doctor-inspect.json")

Metadata only: nothing is copied, synced or gathered, so it is safe at any model size.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from doctor.checks.placement import (
    ZeroPromise,
    fp32_partition_placement,
    grad_accum_dtype,
    optimizer_state_colocation,
    param_partition_placement,
)
from doctor.collect.devicemap import Recorder, collect
from doctor.files import write_atomic
from doctor.redact import scrub
from reports.records import Finding, TensorRecord


@dataclasses.dataclass(frozen=True)
class Inspection:
    records: tuple[TensorRecord, ...]
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not any(f.is_error for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return scrub({"device_map": [r.to_dict() for r in self.records], "findings": [f.to_dict() for f in self.findings]})

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        write_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return path


def engine_config(engine: Any) -> Mapping[str, Any] | None:
    """The config dict a DeepSpeed engine was built from."""
    params = getattr(getattr(engine, "_config", None), "_param_dict", None)
    if isinstance(params, Mapping):
        return params
    config = getattr(engine, "config", None)
    return config if isinstance(config, Mapping) else None


def current_rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except ImportError:
        return 0


def inspect(model: Any = None, optimizer: Any = None, *, engine: Any = None, stage: str = "inspect",
            config: Mapping[str, Any] | None = None, accelerator: str | None = None) -> Inspection:
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

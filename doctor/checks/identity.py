"""Identity invariants (S1): the objects DeepSpeed and the optimizer hold are the module's live parameters.

DeepSpeed keys `engine.param_names` by Parameter object, and optimizers hold Parameter objects.
Anything that swaps a module's parameters for new objects after `deepspeed.initialize`
(`accelerate.dispatch_model`, `set_module_tensor_to_device(value=...)`,
`load_state_dict(assign=True)`) leaves both pointing at objects the module no longer has. These
checks compare live objects by identity while holding references to both sides, so no `id()` is
stored and reused; evidence is the device-map record of each offending parameter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ds_doctor.collect.devicemap import Recorder
from ds_doctor.collect.tracked import optimizer_groups
from ds_doctor.reports.model import Finding, Severity, TensorRecord

NamedParams = Sequence[tuple[str, Any]]

REMEDY_ORDER = (
    "Place or dispatch the model before deepspeed.initialize / accelerator.prepare, so the engine and the "
    "optimizer see the final Parameter objects."
)
REMEDY_NAME_MAP = (
    REMEDY_ORDER + " If parameters must be replaced afterwards, rebuild the map "
    "(engine.param_names = {p: n for n, p in engine.module.named_parameters()}), or save with "
    "save_checkpoint(..., exclude_frozen_parameters=True) where the frozen weights are kept elsewhere."
)
REMEDY_OPTIMIZER = (
    REMEDY_ORDER + " To change values after initialize, copy in place (load_state_dict without "
    "assign=True, or `with torch.no_grad(): p.copy_(value)`) instead of replacing the Parameter."
)
REMEDY_META = (
    'Do not dispatch a model you train to "disk" after initialize; dispatch before it, or materialise the '
    "offloaded weights before saving."
)


def _record(name: str, param: Any, rank: int, stage: str) -> TensorRecord:
    recorder = Recorder(rank, stage)
    recorder.add(param, role="param", path=name, owner=name)
    return recorder.records[0]


def _kind(param: Any) -> str:
    return "trainable" if getattr(param, "requires_grad", False) else "frozen"


def param_name_map(
    named_params: NamedParams,
    param_names: Mapping[Any, str] | None,
    *,
    rank: int,
    stage: str,
    map_name: str = "engine.param_names",
    severity: Severity = Severity.ERROR,
    consequence: str = "a checkpoint save that looks it up fails",
) -> list[Finding]:
    """Every `module.named_parameters()` object is a key of `engine.param_names` (or another Parameter -> name
    map, `map_name`) under the same name."""
    if param_names is None:
        return [
            Finding(
                "param_name_map",
                Severity.INFO,
                "the engine keeps no param_names map; nothing to compare",
                rank,
                stage,
            )
        ]
    findings = []
    for name, param in named_params:
        mapped = param_names.get(param)  # a Parameter hashes by identity
        if mapped == name:
            continue
        if mapped is None:
            message = (
                f"{name} ({_kind(param)}) is not a key of {map_name}: the Parameter object was replaced "
                f"after initialize, and {consequence}"
            )
        else:
            message = f"{name} ({_kind(param)}) is in {map_name} under another name, {mapped!r}"
        findings.append(
            Finding(
                "param_name_map",
                severity,
                message,
                rank,
                stage,
                expected=f"{map_name}[module.{name}] == {name!r}",
                evidence=(_record(name, param, rank, stage),),
                remedy=REMEDY_NAME_MAP,
            )
        )
    return findings


def held_parameters(optimizer: Any) -> list[Any]:
    """The module parameters an optimizer holds, all groups together
    (see `ds_doctor.collect.tracked.optimizer_groups`)."""
    return [p for group in optimizer_groups(optimizer) for p in group]


def optimizer_params_live(
    named_params: NamedParams, held: Iterable[Any], *, rank: int, stage: str
) -> list[Finding]:
    """Every parameter the optimizer holds is a live parameter of the module, and every trainable
    module parameter is held by the optimizer."""
    held = list(held)
    held_ids = {id(p) for p in held}  # both sides are alive for the whole call: ids are not reused here
    live_ids = {id(p) for _, p in named_params}
    findings = []
    orphans = [p for p in held if id(p) not in live_ids]
    for index, orphan in enumerate(orphans):
        findings.append(
            Finding(
                "optimizer_params_live",
                Severity.ERROR,
                f"the optimizer holds a {tuple(orphan.shape)} tensor that is no longer a parameter of the module: "
                "its steps update an orphan",
                rank,
                stage,
                expected="every tensor the optimizer holds is a module parameter",
                evidence=(_record(f"<orphan {index}>", orphan, rank, stage),),
                remedy=REMEDY_OPTIMIZER,
            )
        )
    for name, param in named_params:
        if getattr(param, "requires_grad", False) and id(param) not in held_ids:
            findings.append(
                Finding(
                    "optimizer_params_live",
                    Severity.ERROR,
                    f"{name} is trainable but the optimizer does not hold it: it will not train",
                    rank,
                    stage,
                    expected="every trainable module parameter is held by the optimizer",
                    evidence=(_record(name, param, rank, stage),),
                    remedy=REMEDY_OPTIMIZER,
                )
            )
    return findings


def no_meta_params(records: Iterable[TensorRecord]) -> list[Finding]:
    """No module parameter is on `meta` (it has no data: a checkpoint saved now stores none)."""
    return [
        Finding(
            "no_meta_params",
            Severity.ERROR,
            f"{r.path} is on meta at {r.stage}: it has no data, and a checkpoint saved now stores none",
            r.rank,
            r.stage,
            expected="every module parameter holds data on a real device",
            evidence=(r,),
            remedy=REMEDY_META,
        )
        for r in records
        if r.role == "param" and r.device == "meta"
    ]


def identity_invariants(
    named_params: NamedParams, engine: Any, records: Iterable[TensorRecord], *, rank: int, stage: str
) -> list[Finding]:
    """All three checks for a DeepSpeed engine, as the frozen_param_names probe runs them before a save."""
    return (
        param_name_map(named_params, getattr(engine, "param_names", None), rank=rank, stage=stage)
        + optimizer_params_live(named_params, held_parameters(engine.optimizer), rank=rank, stage=stage)
        + no_meta_params(records)
    )

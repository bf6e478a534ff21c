"""Typed views of a case: what the renderers draw (a table of steps, a bandwidth curve, the model and the configs a case
trained with, what a reproduction showed for real, where a hang's collectives were read from, the GPU a health case
judged), each read back from what a `CaseResult` carries.

A probe publishes a view by writing the note the view travels under, named by the view's type
(`ctx.note(StepTable.NOTE, {...})`); ds-doctor's own check families, which are no probes, carry theirs by the family
name the view declares (`GpuCheck.FAMILY`, which the check writes its cases under). Renderers ask for a view by its type
(`view_of(result, StepTable)`) and name no probe and no note key: this module is the one place that knows where a
view travels in a report. The report's JSON is what it was, so a report written before views reads the same.

A view's `read` takes a report's free-form JSON as it comes (a report is data from anywhere): a shape it does not
expect is no view, never an error.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Protocol, TypeVar

from ds_doctor.reports.model import CaseResult, Finding


class View(Protocol):
    """A typed value a renderer draws, read from one case (None where the case carries none)."""

    @classmethod
    def read(cls, result: CaseResult) -> View | None: ...


V = TypeVar("V", bound=View)
C = TypeVar("C", bound="ConfigNote")

_VIEWS: dict[str, type[View]] = {}


def register(kind: type[V]) -> type[V]:
    """A view type renderers may ask for (a class decorator); a name taken by another type is refused, naming both."""
    taken = _VIEWS.get(kind.__name__)
    if taken is not None and taken is not kind:
        raise ValueError(f"view {kind.__name__!r} is both {taken.__module__}'s and {kind.__module__}'s")
    _VIEWS[kind.__name__] = kind
    return kind


def views() -> tuple[type[View], ...]:
    """The view types, in the order they were registered."""
    return tuple(_VIEWS.values())


def view_of(result: CaseResult, kind: type[V]) -> V | None:
    """The view of type `kind` that `result` carries, or None."""
    found = kind.read(result)
    return found if isinstance(found, kind) else None


def views_of(result: CaseResult) -> tuple[View, ...]:
    """Every registered view `result` carries, in registration order."""
    return tuple(found for kind in _VIEWS.values() if (found := kind.read(result)) is not None)


# ---- a table of steps: the route against its reference ------------------------------------------------------------

QUANTITIES = ("loss", "grad_norm")


@dataclasses.dataclass(frozen=True)
class Pair:
    route: float
    reference: float

    @property
    def relative(self) -> float:
        """|route - reference| / |reference|: inf where only the reference is 0, nan where either is nan."""
        gap = abs(self.route - self.reference)
        if self.reference == 0:
            return 0.0 if gap == 0 else math.inf
        return gap / abs(self.reference)


@dataclasses.dataclass(frozen=True)
class Step:
    number: int  # 1-based, as the findings count steps
    values: dict[str, Pair]  # quantity -> the route's and the reference's value


def _number(value: Any) -> float | None:
    """`value` as a float, or None where it is none: a bool is a flag, not a loss, and an integer past a float's
    range (a report's notes are free-form JSON, which reads 1e400 written out in digits as an int) makes `float()`
    raise. NaN and infinity stay: a NaN loss is what the table has to show (the chart leaves it out)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _pair(value: Any) -> Pair | None:
    if not isinstance(value, dict):
        return None
    route, reference = _number(value.get("route")), _number(value.get("reference"))
    if route is None or reference is None:
        return None
    return Pair(route, reference)


@register
@dataclasses.dataclass(frozen=True)
class StepTable:
    """Loss and gradient norm of a route and of its reference at each optimizer step, and the tolerance they were
    held to as the probe stated it: a table in the Markdown of a case that needs a look, charts in the HTML. The
    note holds more (the probe's own facts beside `tolerance` and `steps`), which the JSON keeps."""

    NOTE: ClassVar[str] = "equivalence"  # the key the equivalence family has always written it under

    tolerance: str
    steps: tuple[Step, ...]

    @classmethod
    def read(cls, result: CaseResult) -> StepTable | None:
        note = result.notes.get(cls.NOTE)
        if not isinstance(note, dict) or not isinstance(note.get("steps"), list):
            return None
        steps = []
        for number, row in enumerate(note["steps"], start=1):
            if isinstance(row, dict):
                pairs = {q: pair for q in QUANTITIES if (pair := _pair(row.get(q))) is not None}
                if pairs:
                    steps.append(Step(number, pairs))
        return cls(str(note.get("tolerance") or ""), tuple(steps)) if steps else None


# ---- a bandwidth curve: bus bandwidth against message size --------------------------------------------------------


@register
@dataclasses.dataclass(frozen=True)
class BandwidthCurve:
    """Bus bandwidth against message size, from a case's series (`ctx.measure_row(bytes=..., busbw_gbps=...)`): the
    rows that give both, of a case of more than one rank (one rank moves nothing over a link), whose rows are split
    no further (rows per pair of nodes are a matrix of pairs, not one curve)."""

    SPLIT_BY: ClassVar[frozenset[str]] = frozenset({"node_a", "node_b"})

    family: str  # the probe that measured it (a chart's title names it)
    name: str  # the case within its family (a chart's legend)
    points: tuple[tuple[float, float], ...]  # (bytes, busbw in GB/s)

    @classmethod
    def read(cls, result: CaseResult) -> BandwidthCurve | None:
        if result.world_size < 2 or any(cls.SPLIT_BY & row.keys() for row in result.series):
            return None
        points = tuple(
            (float(row["bytes"]), float(row["busbw_gbps"]))
            for row in result.series
            if isinstance(row.get("bytes"), (int, float)) and isinstance(row.get("busbw_gbps"), (int, float))
        )
        if not points:
            return None
        name = result.label.removeprefix(f"{result.probe}[").removesuffix("]")
        return cls(result.probe, name, points)


# ---- what a case trained: the model, the user's configs -----------------------------------------------------------


@register
@dataclasses.dataclass(frozen=True)
class ModelNote:
    """The model a case trained, described (its class and size where the user gave one)."""

    NOTE: ClassVar[str] = "model"

    description: str

    @classmethod
    def read(cls, result: CaseResult) -> ModelNote | None:
        value = result.notes.get(cls.NOTE)
        return cls(value) if isinstance(value, str) and value else None


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _sequence(value: Any) -> list[Any]:
    """A note's list, or none: a report's notes are free-form JSON, a number where a list belongs among them."""
    return value if isinstance(value, list) else []


@dataclasses.dataclass(frozen=True)
class ConfigNote:
    """A config file the user handed over, as one case ran it: where it was, its hash, the values filled in for
    `auto`, what was changed to run it on this node (and why), the `auto` values left for DeepSpeed to fill."""

    NOTE: ClassVar[str]

    path: str
    sha256: str
    filled: dict[str, Any]  # "a.b" -> the value put where the file says "auto"
    changed: dict[str, str]  # "a.b" -> what was changed to run it on this node, and why
    left_to_deepspeed: tuple[str, ...]  # "auto" values DeepSpeed fills itself

    @classmethod
    def read(cls: type[C], result: CaseResult) -> C | None:
        note = result.notes.get(cls.NOTE)
        if not isinstance(note, dict):
            return None
        return cls(
            path=str(note.get("path", "")),
            sha256=str(note.get("sha256", "")),
            filled=_mapping(note.get("filled")),
            changed={str(k): str(v) for k, v in _mapping(note.get("changed")).items()},
            left_to_deepspeed=tuple(str(v) for v in _sequence(note.get("left_to_deepspeed"))),
        )


@register
class DeepSpeedConfigNote(ConfigNote):
    """The user's DeepSpeed config (`run --deepspeed-config`), as a case ran it."""

    NOTE: ClassVar[str] = "user_config"


@register
class AccelerateConfigNote(ConfigNote):
    """The user's Accelerate config (`run --accelerate-config`), as a case ran it."""

    NOTE: ClassVar[str] = "accelerate_config"


# ---- what ds-doctor itself notes of any case ----------------------------------------------------------------------


@register
@dataclasses.dataclass(frozen=True)
class Showed:
    """What a reproduced case saw go wrong for real (`ctx.showed`). A lone string or number in a report read back
    stands for a list of one, any other shape for none."""

    NOTE: ClassVar[str] = "showed"

    items: tuple[str, ...]

    @classmethod
    def read(cls, result: CaseResult) -> Showed | None:
        value = result.notes.get(cls.NOTE)
        if isinstance(value, list):
            items = tuple(str(item) for item in value)
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool) and value != "":
            items = (str(value),)
        else:
            items = ()
        return cls(items) if items else None


@register
@dataclasses.dataclass(frozen=True)
class HangSource:
    """Where a hung case's collective positions were read from (the launch's forensics: a Flight Recorder dump, or
    ds-doctor's own record), as the report has it (free-form JSON: shown as text)."""

    NOTE: ClassVar[str] = "forensics"

    collectives_from: object

    @classmethod
    def read(cls, result: CaseResult) -> HangSource | None:
        forensics = result.notes.get(cls.NOTE)
        found = forensics.get("collectives_from") if isinstance(forensics, dict) else None
        return cls(found) if found else None


# ---- ds-doctor's own check families: their cases carry the view by family name -----------------------------------


@register
@dataclasses.dataclass(frozen=True)
class GpuCheck:
    """A GPU judged by ds-doctor's health rules (NVML): the case names the GPU, its findings are the rules it broke.
    `ds_doctor.checks.health` writes its cases under `FAMILY`."""

    FAMILY: ClassVar[str] = "gpu_health"

    gpu: str  # the case's key, which names the GPU: `gpu_health[gpu1]`
    findings: tuple[Finding, ...]

    @classmethod
    def read(cls, result: CaseResult) -> GpuCheck | None:
        return cls(result.key, result.findings) if result.probe == cls.FAMILY else None


@register
@dataclasses.dataclass(frozen=True)
class NodeRecordCheck:
    """One of the node's fault records (Xid, AER, InfiniBand, DCGM) judged by ds-doctor's rules: the record it read,
    and the findings. `ds_doctor.checks.noderecords` writes its cases under `FAMILY`."""

    FAMILY: ClassVar[str] = "node_records"

    record: str  # `xid` of `node_records[xid]`
    findings: tuple[Finding, ...]

    @classmethod
    def read(cls, result: CaseResult) -> NodeRecordCheck | None:
        if result.probe != cls.FAMILY:
            return None
        return cls(result.case.partition("[")[2].rstrip("]"), result.findings)

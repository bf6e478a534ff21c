"""What a rank was doing when its case hung, and how long it spent per stage: plain data a rank summary carries.

`ThreadStack` is one thread's Python stack, innermost frame first, with torch's internals folded into one
marker frame; `CollectivePosition` is where the rank stood in one process group's collectives (from torch's
Flight Recorder, or ds-doctor's thin record where the recorder is not there); `StageTime` is one stage of a case
on one rank, for the straggler check, with its `StageKind`: whose time it was.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Frame:
    function: str
    file: str = ""  # "" for a marker frame standing for frames folded away
    line: int = 0

    @property
    def folded(self) -> bool:
        return not self.file

    def __str__(self) -> str:
        return self.function if self.folded else f"{self.function} ({self.file}:{self.line})"


@dataclasses.dataclass(frozen=True)
class ThreadStack:
    """One thread of a hung rank. `current`: the thread the stack signal interrupted (faulthandler's own mark)."""

    name: str
    frames: tuple[Frame, ...]  # innermost first
    current: bool = False

    @property
    def innermost(self) -> Frame | None:
        return next((f for f in self.frames if not f.folded), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "current": self.current,
            "frames": [dataclasses.asdict(f) for f in self.frames],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ThreadStack:
        return cls(
            name=str(data.get("name", "")),
            current=bool(data.get("current")),
            frames=tuple(Frame(**f) for f in data.get("frames", ())),
        )


@dataclasses.dataclass(frozen=True)
class CollectivePosition:
    """A rank in one process group: the last collective it completed, and the one it is inside (None: none)."""

    group: str  # "<name>:<description>", e.g. "0:default_pg"
    last_completed: int  # its sequence id, 0 before the first
    op: str | None = None  # e.g. "all_reduce"
    seq: int | None = None
    sizes: str | None = None  # "in [[1024]] Float, out [[1024]] Float"
    state: str | None = None  # the recorder's: scheduled, started, completed

    def describe(self) -> str:
        if self.op is None:
            return f"not in a collective of {self.group} (last completed #{self.last_completed})"
        return f"in {self.op} #{self.seq} of {self.group} ({self.sizes}; {self.state})"


class StageKind(str, enum.Enum):
    """Whose time a stage of a rank was. Only a case's own stages can hold a straggler (`ds_doctor.checks.hang`):
    the others are ds-doctor's scaffolding, where ranks wait on one another by design (one builds or loads
    DeepSpeed's ops under a file lock while the others wait for it)."""

    CASE = "case"  # the case's own work, from its start ("start", then each stage its probe enters)
    SETUP = "setup"  # its probe's one-off setup before the rank's first case of it: "setup", "load <Builder>", ...


@dataclasses.dataclass(frozen=True)
class StageTime:
    stage: str
    start_s: float  # since the case started on this rank (a setup's stages, before it, are negative)
    duration_s: float
    kind: StageKind = StageKind.CASE
    # when it started, in seconds since the epoch on the rank's clock: ranks start a case at different times (one
    # loaded DeepSpeed's ops longer), so when each left a stage is compared on it; None in a report from before
    at: float | None = None

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    @property
    def left_at(self) -> float | None:
        """When the rank left the stage, on its clock (None where the report has no `at`)."""
        return None if self.at is None else self.at + self.duration_s


def _items(data: Iterable[Any] | None) -> list[Any]:
    return [
        item for item in data or () if isinstance(item, (Mapping, ThreadStack, CollectivePosition, StageTime))
    ]


def stacks_from(data: Iterable[Any] | None) -> tuple[ThreadStack, ...]:
    """Read back from JSON (or passed through when already typed), as every `*_from` below."""
    return tuple(i if isinstance(i, ThreadStack) else ThreadStack.from_dict(i) for i in _items(data))


def positions_from(data: Iterable[Any] | None) -> tuple[CollectivePosition, ...]:
    return tuple(i if isinstance(i, CollectivePosition) else CollectivePosition(**i) for i in _items(data))


def stages_from(data: Iterable[Any] | None) -> tuple[StageTime, ...]:
    """A report from before the kinds holds the case's stages only: each is the case's."""
    return tuple(
        i
        if isinstance(i, StageTime)
        else StageTime(**{**i, "kind": StageKind(i.get("kind", StageKind.CASE))})
        for i in _items(data)
    )


def format_stacks(stacks: Iterable[ThreadStack]) -> str:
    """Every thread of a rank, innermost frame first, as a ticket shows it."""
    blocks = []
    for stack in stacks:
        head = f"thread {stack.name}" + (" (interrupted by the stack signal)" if stack.current else "")
        blocks.append("\n".join([head, *[f"  {frame}" for frame in stack.frames]]))
    return "\n\n".join(blocks)

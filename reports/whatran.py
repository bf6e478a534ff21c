"""What a run ran, read back from its cases' notes: the models (class and size where the user gave one), the user's
DeepSpeed config with the values filled in for `auto` and the changes made to run it here, the user's Accelerate
config. The Markdown and the HTML report both say it before the environment, so a maintainer reading the ticket
knows what was trained before reading what went wrong."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from ds_doctor.reports.records import Report


@dataclasses.dataclass(frozen=True)
class UserConfig:
    """A config file the user handed over, as the cases ran it."""

    path: str
    sha256: str
    cases: int
    filled: dict[str, Any]  # "a.b" -> the value put where the file says "auto"
    changed: dict[str, str]  # "a.b" -> what was changed to run it on this node, and why
    left_to_deepspeed: tuple[str, ...]  # "auto" values DeepSpeed fills itself


@dataclasses.dataclass(frozen=True)
class WhatRan:
    models: tuple[tuple[str, int], ...]  # each model's description, and how many cases trained it
    deepspeed: UserConfig | None
    accelerate: UserConfig | None

    def __bool__(self) -> bool:
        return bool(self.models or self.deepspeed or self.accelerate)


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, dict) else {}


def _sequence(value: Any) -> list[Any]:
    """A note's list, or none: a report's notes are free-form JSON, a number where a list belongs among them."""
    return value if isinstance(value, list) else []


def _user_config(notes: list[dict[str, Any]]) -> UserConfig | None:
    if not notes:
        return None
    first = notes[0]
    return UserConfig(
        path=str(first.get("path", "")),
        sha256=str(first.get("sha256", "")),
        cases=len(notes),
        filled=_mapping(first.get("filled")),
        changed={str(k): str(v) for k, v in _mapping(first.get("changed")).items()},
        left_to_deepspeed=tuple(str(v) for v in _sequence(first.get("left_to_deepspeed"))),
    )


def what_ran(report: Report) -> WhatRan:
    """The models and user configs of `report`'s cases, from the notes the probes wrote (nothing is re-run)."""
    models: Counter[str] = Counter()
    deepspeed: list[dict[str, Any]] = []
    accelerate: list[dict[str, Any]] = []
    for result in report.results:
        model = result.notes.get("model")
        if isinstance(model, str) and model:
            models[model] += 1
        if isinstance(result.notes.get("user_config"), dict):
            deepspeed.append(result.notes["user_config"])
        if isinstance(result.notes.get("accelerate_config"), dict):
            accelerate.append(result.notes["accelerate_config"])
    return WhatRan(tuple(models.most_common()), _user_config(deepspeed), _user_config(accelerate))

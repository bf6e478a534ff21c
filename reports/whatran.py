"""What a run ran, read back from its cases' views (`ds_doctor.reports.views`): the models (class and size where the
user gave one), the user's DeepSpeed config with the values filled in for `auto` and the changes made to run it here,
the user's Accelerate config. The Markdown and the HTML report both say it before the environment, so a maintainer
reading the ticket knows what was trained before reading what went wrong."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ds_doctor.reports.model import Report
from ds_doctor.reports.views import AccelerateConfigNote, ConfigNote, DeepSpeedConfigNote, ModelNote, view_of


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


def _user_config(notes: Sequence[ConfigNote]) -> UserConfig | None:
    if not notes:
        return None
    first = notes[0]
    return UserConfig(
        path=first.path,
        sha256=first.sha256,
        cases=len(notes),
        filled=first.filled,
        changed=first.changed,
        left_to_deepspeed=first.left_to_deepspeed,
    )


def what_ran(report: Report) -> WhatRan:
    """The models and user configs of `report`'s cases, from the views the probes published (nothing is re-run)."""
    models: Counter[str] = Counter()
    deepspeed: list[ConfigNote] = []
    accelerate: list[ConfigNote] = []
    for result in report.results:
        if (model := view_of(result, ModelNote)) is not None:
            models[model.description] += 1
        if (user := view_of(result, DeepSpeedConfigNote)) is not None:
            deepspeed.append(user)
        if (setup := view_of(result, AccelerateConfigNote)) is not None:
            accelerate.append(setup)
    return WhatRan(tuple(models.most_common()), _user_config(deepspeed), _user_config(accelerate))

"""The shrink of a diverging knob-matrix setting: each turned knob set back to its default in turn, kept there where
the divergence stays, within a time budget; the ranks agree on every answer. Shared by the family's sessions
(`probe`) and the Trainer route (`trainer`), each with its own rerun."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from ds_doctor.plugins import ProbeContext
from ds_doctor.probes.equivalence.cases import Route, with_knobs
from ds_doctor.probes.equivalence.invariants import agree
from ds_doctor.probes.equivalence.knobs import allowed

#: how long a diverging matrix setting may spend on its shrink's reruns (the whole case has SPEC.timeout_s)
SHRINK_BUDGET_S = 90.0


class _Quiet:
    """The case's context for a rerun of another setting: what that run would note or find is not this case's."""

    def __init__(self, ctx: ProbeContext) -> None:
        self._ctx = ctx

    def note(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def add_findings(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)


def quiet(ctx: ProbeContext) -> ProbeContext:
    """`ctx` for a rerun: its notes and findings dropped, the rest the case's."""
    return cast(ProbeContext, _Quiet(ctx))


def smallest(ctx: ProbeContext, route: Route, rerun: Callable[[ProbeContext, Route], bool]) -> str:
    """The smallest setting found that still diverges: each turned knob set back to its default in turn, and kept
    there where the divergence stays (`rerun` the setting: every rank reruns the same settings and the ranks agree
    on each answer), within SHRINK_BUDGET_S (a release whose reruns are slow stops early, and says so). In words."""
    assert route.knobs is not None
    current, tried, raised, stopped = route.knobs, 0, [], ""
    rerun_ctx = quiet(ctx)
    started, longest = time.monotonic(), 0.0
    for knob in route.knobs.changed():
        # a setting that means nothing (fp32 accumulation of fp32 gradients) is not rerun: the knob stays
        if not allowed(current.back(knob)):
            continue
        # every rank stops where any would pass the budget with one more rerun as long as the longest so far
        if agree(ctx, int(time.monotonic() - started + longest > SHRINK_BUDGET_S)):
            stopped = f"; stopped before {knob}: the shrink's {SHRINK_BUDGET_S:g} s were spent"
            break
        candidate = with_knobs(route, current.back(knob))
        ctx.enter(f"shrink: {knob} back")
        tried += 1
        began = time.monotonic()
        # each rank's answer: 1 it still diverges, 0 it does not, 2 the rerun raised (a setting this release cannot
        # run, or skips): any rank's 2 keeps the knob turned on every rank, else any rank's 1 sets it back
        try:
            answer = int(rerun(rerun_ctx, candidate))
        except Exception as exc:  # a rerun's failure is reported in the finding, not the case's
            raised.append(f"with {knob} back it raised {type(exc).__name__}: {str(exc)[:120]}")
            answer = 2
        longest = max(longest, time.monotonic() - began)
        agreed = agree(ctx, answer)
        if agreed == 2 and answer != 2:
            raised.append(f"with {knob} back another rank raised")
        if agreed == 1:
            current = current.back(knob)
    reruns = f"{tried} rerun{'s' if tried != 1 else ''}"
    caveat = f"; kept turned where a rerun could not tell: {'; '.join(raised)}" if raised else ""
    caveat += stopped
    return (
        f"the smallest setting found that still shows it ({reruns}, each turned knob set back to its default in "
        f"turn and kept there where the divergence stayed): {current.describe()}{caveat}"
    )

"""Two probes that tell when they ran, for the launches that take turns (DS_DOCTOR_EXTRA_PROBES=`REGISTER`):
`turn_busy` keeps a core busy for a while (no collective: any launch's work), `turn_timed` runs alone as a timed case
would. Each notes its wall-clock start and end, so a test can line up the cases of launches that ran at once. Only
the tests register this module."""

from __future__ import annotations

import time

from ds_doctor.plugins import ProbeContext, ProbeSpec, Requirement, Variant

#: long enough that the two launches' busy cases meet on a loaded box: a fresh clone's `make test` started the ws2
#: launch's 1.7 s after the ws1 launch's (a 1.5 s case missed it)
BUSY_S = 5.0
TIMED_S = 0.3


def _spec(name: str, alone: bool) -> ProbeSpec:
    return ProbeSpec(
        name=name,
        scenario="smoke",
        description="notes when it ran (tests of launches taking turns)",
        world_sizes=(1, 2),
        requires=(Requirement("torch", "torch"),),
        timeout_s=60.0,
        alone=alone,
    )


def _timed(ctx: ProbeContext, seconds: float, busy: bool) -> None:
    started = time.time()
    while time.time() - started < seconds:
        if not busy:
            time.sleep(0.01)
    ctx.note("started", started)
    ctx.note("ended", time.time())


class _Probe:
    def __init__(self, name: str, alone: bool, seconds: float) -> None:
        self.SPEC = _spec(name, alone)
        self.seconds, self.busy = seconds, not alone

    def variants(self) -> list[Variant]:
        return [Variant("once", None, level=2)]

    def run(self, ctx: ProbeContext) -> None:
        _timed(ctx, self.seconds, self.busy)


BUSY = _Probe("turn_busy", False, BUSY_S)
TIMED = _Probe("turn_timed", True, TIMED_S)
REGISTER = f"{__name__}:BUSY,{__name__}:TIMED"

"""A probe registered by the tests only (DS_DOCTOR_EXTRA_PROBES), for a run stopped by a signal mid-way: `first`
finishes, `second` waits to be stopped, `third` is never reached. Each prints the token planted in `HF_TOKEN` to its
rank's log first, as a library that logs its configuration would: a stopped run's logs must not keep it."""

from __future__ import annotations

import os
import sys
import time

from ds_doctor.plugins import ProbeContext, ProbeSpec, Variant

SPEC = ProbeSpec(
    name="stops",
    scenario="smoke",
    description="a case to stop a run in (tests of stopped runs)",
    world_sizes=(1,),
    timeout_s=300.0,
)

#: the stage the second case waits in, for the test to stop the run there
WAITING = "waiting to be stopped"


def variants() -> list[Variant]:
    return [Variant(name, name) for name in ("first", "second", "third")]


def run(ctx: ProbeContext) -> None:
    print(f"logging in to the hub with token {os.environ.get('HF_TOKEN')}", file=sys.stderr, flush=True)
    if ctx.params == "second":
        ctx.enter(WAITING)
        time.sleep(3600)

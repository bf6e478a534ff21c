"""Wall-clock bounds in the tests (issue 45: two failed on a loaded 2-core box). A test never asserts speed, which
depends on the machine and its load; speed targets live in bench/. A test's wall-clock bound is one of two kinds:

* a generous bound, named for what it guards: a hang or a runaway (a regex that backtracks, an endless stream read to
  its end, a wait that never ends, a command never killed, a limit never applied), which costs minutes or forever.
  The work under it takes seconds even on 2 cores beside 4 CPU hogs, and a hang planted to be cut short lasts
  longer than the bound (`PLANTED_HANG_S`), so that only the cure passes;
* a ratio against a baseline of the same work measured in the same test (`ratio`): load slows both sides alike,
  and a runaway's ratio is in the hundreds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Only a hang or a runaway takes this long: what a test bounds with it takes seconds, ten times that on 2 cores
#: beside 4 CPU hogs (a regex that backtracks took 57 s on 80 KB before its fix; a wait never cut short, forever).
GENEROUS_S = 60.0
#: ...for a whole `ds-doctor run` of several launches: a minute or two on 2 loaded cores, where a hang the supervisor
#: never cuts short runs into the subprocess's own timeout.
GENEROUS_RUN_S = 600.0
#: A planted hang (`sleep`) that ds-doctor must cut short: longer than the bound that tells the cure from the hang.
PLANTED_HANG_S = 2 * GENEROUS_S


def seconds(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def ratio(work: Callable[[], object], baseline: Callable[[], object], limit: float, tries: int = 3) -> float:
    """How many times `baseline`'s time `work` takes, both measured here and now; measured again (up to `tries`
    times, the lowest kept) only while over `limit`: a stall of the machine in one try is not the work's."""
    best = float("inf")
    for _ in range(tries):
        best = min(best, seconds(work) / max(seconds(baseline), 1e-6))
        if best <= limit:
            break
    return best

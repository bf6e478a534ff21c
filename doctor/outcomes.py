"""The closed set of case outcomes and the CLI's exit codes."""

from __future__ import annotations

import enum


class Outcome(str, enum.Enum):
    """How one case ended. `xfail`/`xpass` only for cases that reproduce a known issue on purpose."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    SKIP = "skip"
    TIMEOUT = "timeout"
    XFAIL = "xfail"
    XPASS = "xpass"


#: Outcomes that make a run unhealthy (exit code 1).
FAILING = frozenset({Outcome.FAIL, Outcome.ERROR, Outcome.TIMEOUT})

#: When ranks disagree, the case takes the first of these that any rank reported.
SEVERITY_ORDER = (
    Outcome.ERROR,
    Outcome.TIMEOUT,
    Outcome.FAIL,
    Outcome.XFAIL,
    Outcome.XPASS,
    Outcome.PASS,
    Outcome.SKIP,
)


def worst(outcomes: list[Outcome]) -> Outcome:
    """The outcome a multi-rank case gets from its ranks' outcomes."""
    for candidate in SEVERITY_ORDER:
        if candidate in outcomes:
            return candidate
    raise ValueError("no outcomes to merge")


class ExitCode(enum.IntEnum):
    OK = 0
    CASES_FAILED = 1
    USAGE_ERROR = 2
    INTERNAL_ERROR = 3

"""Which rank failed first, when the rest of a log is other ranks echoing its death (NCCL remote errors, broken
pipes, watchdogs stopping).

Two places say it: torchrun's failure summary ("Root Cause (first observed failure):" then the rank, its exit code
and its error), and the rank-prefixed tracebacks (`[rank3]: RuntimeError: ...`, torchrun --tee's `[default3]:`)
where one rank's first error is something other than the echo. The summary wins: it is torchrun's own record of
who exited first. The log is read as given (before the normaliser strips the prefixes) and bounded like the rest
of triage: a line is looked at once.
"""

from __future__ import annotations

import dataclasses
import re

from ds_doctor.reports.model import Finding, Severity
from ds_doctor.userinput import check_rank

#: an error that only says a peer went away: not the first failure, whoever prints it
ECHO = re.compile(
    r"ncclRemoteError|remote process exited or there was a network error|Broken pipe|"
    r"Connection reset by peer|Connection closed by remote peer|watchdog thread terminated|"
    r"Watchdog caught collective operation timeout|DistNetworkError|ChildFailedError|"
    r"ProcessGroupNCCL is shutting down|NCCL communicator was aborted|SignalException",
    re.IGNORECASE,
)
_ROOT = re.compile(r"Root Cause \(first observed failure\):\s*\n(?P<block>(?:[^\n]*\n){1,12})")
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d{1,7})", re.MULTILINE)
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d{1,4})[^\n]*", re.MULTILINE)
_ROOT_TRACE = re.compile(r"^\s*traceback\s*:\s*([^\n]{1,300})", re.MULTILINE)
_PREFIXED_ERROR = re.compile(
    r"^\[(?:rank|default)(\d{1,7})\]:\s*((?:[A-Za-z_][\w.]{0,120})?(?:Error|Exception|"
    r"Interrupt)(?::[^\n]{0,300})?)$",
    re.MULTILINE,
)
WHAT_CHARS = 200


@dataclasses.dataclass(frozen=True)
class FirstFailure:
    rank: int
    what: str  # its error line, or its exit code and signal
    source: str  # where the log says so


def _root_cause(text: str) -> FirstFailure | None:
    found = _ROOT.search(text)
    if found is None:
        return None
    block = found.group("block")
    rank = _ROOT_RANK.search(block)
    if rank is None:
        return None
    exit_line, trace = _ROOT_EXIT.search(block), _ROOT_TRACE.search(block)
    parts = [
        f"exitcode {exit_line.group(1)}" if exit_line else "",
        trace.group(1).strip() if trace and "<N/A>" not in trace.group(1) else "",
    ]
    what = "; ".join(part for part in parts if part) or "no exit code in the summary"
    return FirstFailure(
        check_rank(int(rank.group(1)), "the log names rank"),
        what[:WHAT_CHARS],
        "torchrun's root-cause summary",
    )


def _first_own_error(text: str) -> FirstFailure | None:
    """The earliest rank-prefixed error line that is not an echo, from a rank whose errors are not all echoes."""
    for found in _PREFIXED_ERROR.finditer(text):
        if not ECHO.search(found.group(2)):
            return FirstFailure(
                check_rank(int(found.group(1)), "the log names rank"),
                found.group(2)[:WHAT_CHARS],
                f"rank {found.group(1)}'s own traceback",
            )
    return None


def first_failure(text: str) -> FirstFailure | None:
    """The rank that failed first, where the log says; None where it does not."""
    return _root_cause(text) or _first_own_error(text)


def peer_findings(text: str) -> list[Finding]:
    """One finding naming the rank that failed first, for a log whose NCCL errors are other ranks' echo of it."""
    first = first_failure(text)
    if first is None:
        return [
            Finding(
                "first_failed_rank",
                Severity.WARNING,
                "the NCCL remote errors are usually other ranks' echo of one that died first, and this log "
                "shows no rank failing before them (no torchrun root-cause summary, no other error behind a "
                "rank prefix): look for a rank whose log stops without this error; if every rank reports "
                "it, look at the network",
                stage="log",
            )
        ]
    echo = bool(ECHO.search(first.what))
    message = f"rank {first.rank} failed first ({first.source}): {first.what}" + (
        ": itself the remote error, so the rank that died is not in this log"
        if echo
        else "; the other ranks' NCCL remote errors follow from it"
    )
    return [
        Finding(
            "first_failed_rank",
            Severity.ERROR,
            message,
            rank=first.rank,
            stage="log",
            remedy="fix that rank's own error; the others only lost their peer",
        )
    ]

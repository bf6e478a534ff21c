"""Every known issue, and one classifier that matches any error text (message, traceback, stderr tail)
against all of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from doctor.knowledge.accelerate import ACCELERATE
from doctor.knowledge.deepspeed import DEEPSPEED
from doctor.knowledge.fsdp import FSDP
from doctor.knowledge.issues import KnownIssue
from doctor.knowledge.launch import LAUNCH

ISSUES: tuple[KnownIssue, ...] = DEEPSPEED + ACCELERATE + FSDP + LAUNCH
TRACEBACK_CHARS = 8000  # what a report keeps of a traceback a probe caught

_BY_ID = {issue.id: issue for issue in ISSUES}
if len(_BY_ID) != len(ISSUES):  # pragma: no cover - guards the table above
    raise RuntimeError("duplicate known-issue id")


def get(issue_id: str) -> KnownIssue:
    return _BY_ID[issue_id]


def classify(text: str, issues: Iterable[KnownIssue] = ISSUES) -> list[KnownIssue]:
    """Known issues whose signature matches an error text, most specific (most patterns required) first."""
    hits = [issue for issue in issues if text and issue.matches(text)]
    return sorted(hits, key=lambda issue: -len(issue.requires))


@dataclasses.dataclass(frozen=True)
class RaisedError:
    """An exception a probe caught on purpose, as text and as what the classifier made of it."""

    type: str
    first_line: str  # the message's first line, at most 300 characters
    traceback: str  # its last TRACEBACK_CHARS characters, for the report
    hits: tuple[KnownIssue, ...]  # classified on the whole traceback

    @classmethod
    def of(cls, exc: BaseException) -> RaisedError:
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        first_line = (str(exc).splitlines() or [""])[0][:300]
        return cls(type(exc).__name__, first_line, text[-TRACEBACK_CHARS:], tuple(classify(text)))

    @property
    def summary(self) -> str:
        return f"{self.type}: {self.first_line}"

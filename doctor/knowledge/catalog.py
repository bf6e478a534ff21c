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
from reports.records import ErrorInfo

ISSUES: tuple[KnownIssue, ...] = DEEPSPEED + ACCELERATE + FSDP + LAUNCH

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
    """An exception a probe caught on purpose, and what the classifier made of it (on its whole traceback)."""

    error: ErrorInfo
    hits: tuple[KnownIssue, ...]

    @classmethod
    def of(cls, exc: BaseException) -> RaisedError:
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(ErrorInfo.of(exc), tuple(classify(text)))

    @property
    def summary(self) -> str:
        return self.error.headline

    @property
    def traceback(self) -> str:
        return self.error.traceback

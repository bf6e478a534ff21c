"""Every known issue (read from `doctor/knowledge/data/*.toml` by `ds_doctor.knowledge.load`), and one classifier
that matches any error text (message, traceback, stderr tail) against all of them.

The data files are read and checked on first use, not at import: probes and the CLI import this module in every
process, and most of them never classify anything. `ISSUES` is a module attribute all the same.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable

from ds_doctor.knowledge.issues import KnownIssue
from ds_doctor.reports.records import ErrorInfo


@functools.cache
def _catalog() -> tuple[tuple[KnownIssue, ...], dict[str, KnownIssue]]:
    from ds_doctor.knowledge.load import load_catalog

    issues = load_catalog()  # checked as it loads: ids unique, regexes compile, ranges parse
    return issues, {issue.id: issue for issue in issues}


def __getattr__(name: str) -> tuple[KnownIssue, ...]:
    """`ISSUES`: every known issue, in catalog order (data/deepspeed, accelerate, fsdp, launch)."""
    if name == "ISSUES":
        return _catalog()[0]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get(issue_id: str) -> KnownIssue:
    return _catalog()[1][issue_id]


def known(issue_id: object) -> bool:
    """Whether `issue_id` is an issue of this catalog (an id read from data may be any value)."""
    return isinstance(issue_id, str) and issue_id in _catalog()[1]


def classify(text: str, issues: Iterable[KnownIssue] | None = None) -> list[KnownIssue]:
    """Known issues (default: all of them) whose signature matches an error text, most specific (most patterns
    required) first: the one matcher's (`ds_doctor.knowledge.matching.classify`), as triage matches."""
    from ds_doctor.knowledge.matching import classify as matched

    return matched(text, issues)


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

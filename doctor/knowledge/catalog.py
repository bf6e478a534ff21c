"""Every known issue (read from `doctor/knowledge/data/*.toml` by `ds_doctor.knowledge.load`), by id. Matching a
text against them is `ds_doctor.knowledge.matching`'s, the one matcher runs and `triage` share.

The data files are read and checked on first use, not at import: probes and the CLI import this module in every
process, and most of them never classify anything. `ISSUES` is a module attribute all the same.
"""

from __future__ import annotations

import functools

from ds_doctor.knowledge.issues import KnownIssue


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

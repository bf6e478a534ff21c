"""The known-issue catalog as a probe asks it: the silent bug a failing setting fits on the stack it ran on.

A silent entry of the catalog (no error text to match) may say which settings show it (`knobs`, conditions such as
"schedule=cosine"); a probe that drives a matrix of settings asks here which entry a diverging setting fits, where
the installed release of the entry's package lies inside its range."""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["fitting_silent_issue"]


def fitting_silent_issue(
    fits: Callable[[Sequence[str]], bool], installed: Callable[[str], str | None] | None = None
) -> str | None:
    """The id of the silent entry whose `knobs` conditions `fits` accepts and whose range holds the installed release
    of its package (`installed`: a package's version; default the one this process imports): the entry with the
    most conditions where several fit (the first in catalog order on a tie); None where none does."""
    from ds_doctor.knowledge import catalog
    from ds_doctor.knowledge.issues import Verdict
    from ds_doctor.releases.overlay import installed as imported

    version = installed or imported
    fitting = [
        issue
        for issue in catalog.ISSUES
        if issue.knobs
        and fits(issue.knobs)
        and issue.version_verdict({name: version(name) for name in issue.packages()}) is Verdict.AFFECTED
    ]
    return max(fitting, key=lambda issue: len(issue.knobs)).id if fitting else None

"""A known upstream issue: its signature in error texts, the versions it affects, its cause and remedy.

Version ranges are PEP 440 specifiers on the named distribution. The entries themselves are data, one TOML file
per library in `doctor/knowledge/data/`, read and checked by `ds_doctor.knowledge.load` (its docstring states the
schema); `ds_doctor.knowledge.catalog` holds them all.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from packaging.requirements import Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from ds_doctor.reports.model import IssueRef, Verdict

REGEX_FLAGS = re.MULTILINE | re.DOTALL  # how patterns and requires are searched in an error text


@dataclasses.dataclass(frozen=True)
class Wording:
    """One wording of an entry's message, as the library's own source prints it in a range of its releases.

    A pattern written from one ticket fits one release; keeping every wording as data lets a test hold each entry's
    patterns to all of them (and to each with its backticks gone, as a ticket shows text GitHub rendered)."""

    text: str  # the message as printed, placeholders filled with sample values
    source: str  # "<distribution> <file in it>" that raises or prints it
    versions: str  # PEP 440 specifier on that distribution: the releases that print this wording
    read: tuple[str, ...]  # the releases whose source was read to say so

    @property
    def package(self) -> str:
        return self.source.split(" ", 1)[0]


@dataclasses.dataclass(frozen=True)
class Lookalike:
    """A text of another cause that shares an entry's words, on which the entry must not be named."""

    text: str
    why: str


@dataclasses.dataclass(frozen=True)
class KnownIssue:
    id: str
    title: str
    package: str  # distribution whose version decides the verdict
    patterns: tuple[str, ...]  # any one matching the error text is a hit...
    cause: str
    remedy: str
    refs: tuple[str, ...]
    requires: tuple[str, ...] = ()  # ...provided all of these match too (frames that disambiguate)
    affected: str = ""  # PEP 440 specifier; "" = every version (environmental or by design)
    fixed_in: str | None = None
    families: tuple[str, ...] = ()
    invariants: tuple[str, ...] = ()  # invariants whose error findings show this issue
    silent: str = ""  # for an entry with no patterns: why no log shows it (what finds it instead)
    wordings: tuple[Wording, ...] = ()  # every wording of its message the releases read print
    # an entry whose message other causes print too (a signal, "unhandled system error"): it is named as the cause
    # only where one of these matches as well; else triage says "possibly", and how to `confirm` it
    evidence: tuple[str, ...] = ()
    confirm: str = ""
    # warnings the library prints before this error: a log holding one without the error names it as "possibly"
    banners: tuple[str, ...] = ()
    # how people name this failure in prose, a title's "CUDA OOM" or "loss is nan": alone, "possibly" the entry
    paraphrases: tuple[str, ...] = ()
    # the native (C++) function that raises this error, as a native stack prints it (`frame #1: c10d::...`): a stack
    # whose message was cut names it as "possibly", matched as a frame
    native_frames: tuple[str, ...] = ()
    lookalikes: tuple[Lookalike, ...] = ()
    # a silent bug's conditions on a knob-matrix setting ("schedule=cosine", "groups=decay|rates", "route=deepspeed-*",
    # "world_size=2"): a matrix case that fits them all and diverges on an affected release names this entry
    knobs: tuple[str, ...] = ()
    # a class, not a cause, named only where nothing more specific matches the text: 1 a class of causes (a native
    # crash, an import error, a hang with no error), 2 a summary that a process failed (a launcher's line), which
    # gives way to a class too; 0 (the default) an entry of its own cause
    fallback: int = 0
    # other releases the range holds only beside ("transformers>=5.0.0"): a bug of two libraries' meeting, where
    # `affected` on `package` alone would name stacks the bug cannot reach
    alongside: tuple[str, ...] = ()

    def beside(self) -> str:
        """How a range says its `alongside` conditions (", with accelerate>=1.7.0,<1.15.0"), or ""."""
        return f", with {' and '.join(self.alongside)}" if self.alongside else ""

    def packages(self) -> tuple[str, ...]:
        """The distributions whose versions decide the verdict: `package`, then those of `alongside`."""
        return (self.package, *(Requirement(a).name for a in self.alongside))

    def matches(self, text: str) -> bool:
        if not any(re.search(p, text, REGEX_FLAGS) for p in self.patterns):
            return False
        return all(re.search(p, text, REGEX_FLAGS) for p in self.requires)

    def version_verdict(self, versions: Mapping[str, str | None]) -> Verdict:
        """affected / not_affected by the installed version; unknown where it cannot tell."""
        installed = versions.get(self.package)
        if not installed or not self.affected:
            return Verdict.UNKNOWN
        try:
            version = Version(installed)
            specifiers = SpecifierSet(self.affected)
            inside = specifiers.contains(version, prereleases=True)
            # "ds 0.14": a series, which a bound inside it splits (a bound may be a wildcard: "==0.14.*")
            split = len(version.release) == 2 and any(
                Version(spec.version.removesuffix(".*")).release[:2] == version.release for spec in specifiers
            )
        except (InvalidVersion, InvalidSpecifier):
            return Verdict.UNKNOWN
        if split:
            return Verdict.UNKNOWN
        if not inside:
            return Verdict.NOT_AFFECTED
        for condition in self.alongside:  # the range holds only beside these releases
            requirement = Requirement(condition)
            beside = versions.get(requirement.name)
            if not beside:
                return Verdict.UNKNOWN
            try:
                if not requirement.specifier.contains(Version(beside), prereleases=True):
                    return Verdict.NOT_AFFECTED
            except InvalidVersion:
                return Verdict.UNKNOWN
        return Verdict.AFFECTED

    def to_ref(self, verdict: Verdict, confirm: str | None = None, match: str | None = None) -> IssueRef:
        """The `known_issue` of a case result: this issue with this stack's verdict (a `possibly` one says how to
        confirm it)."""
        affected = f"{self.package} {self.affected}" if self.affected else f"{self.package} (any)"
        if self.affected:  # where the range comes from: releases measured here, or the upstream threads
            from ds_doctor.knowledge.measured import for_issue

            seen = sorted(
                {r.version for r in for_issue(self.id) if r.outcome != "does_not_import"}, key=Version
            )
            affected += f" (measured here at {', '.join(seen)})" if seen else " (from upstream reports)"
        affected += self.beside()
        return IssueRef(
            id=self.id,
            title=self.title,
            verdict=verdict,
            affected_versions=affected,
            remedy=self.remedy,
            refs=self.refs,
            fixed_in=self.fixed_in,
            confirm=(confirm or self.confirm or None) if verdict == Verdict.POSSIBLY else None,
            match=match,
        )

"""`ds-doctor triage` output: each known issue a user's log matched, and what a hang's evidence says, as plain
data and as text.

The text goes to a terminal: every value (the log's own words among them) goes through
`ds_doctor.reports.safe.one_line`,
so it stays on its line and its control characters and escape sequences are shown, never sent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from ds_doctor.reports.hang import CollectivePosition
from ds_doctor.reports.model import MATCH_SAID, Finding, IssueRef
from ds_doctor.reports.safe import md_code, md_text, md_url, one_line


@dataclasses.dataclass(frozen=True)
class VersionUsed:
    """The version of a package a verdict was judged on, and where it came from ("the log", "this machine"); `also`:
    the versions the log lists after it ("deepspeed: 0.15.3 & 0.14.5": the user ran each). The verdict is judged on
    the first, and says the others."""

    version: str | None
    source: str
    also: tuple[str, ...] = ()

    @property
    def said(self) -> str:
        """ "0.15.3 (also 0.14.5)", "2.5.1", or "not installed"."""
        first = self.version or "not installed"
        return f"{first} (also {', '.join(self.also)})" if self.also else first


@dataclasses.dataclass(frozen=True)
class TriageMatch:
    """One known issue found in a log: the issue with its verdict for the version used, the span that matched."""

    issue: IssueRef
    package: str  # the distribution whose version decides the verdict
    cause: str
    version: VersionUsed
    position: int  # where its first pattern matched in the (normalised) input
    line: str  # the matched span, scrubbed
    strength: str = "message only"  # or "message and context" (its `requires` matched), "message and frames"
    context: tuple[
        str, ...
    ] = ()  # what backs it beyond the message: the spans its requires or frames matched
    confirm: str | None = None  # a "possibly" match: how to confirm it (nothing in the log did)
    kind: str = (
        "wording"  # how it matched (`ds_doctor.knowledge.structure.Kind`): wording, loose, cut, frame, banner
    )
    # a class of failures (a launcher's summary, a segfault, an import error, ...): the entry's `fallback`, named only
    # where nothing more specific shows; it says what kind of failure it was, never that a release has a bug
    fallback: int = 0

    @property
    def possibly(self) -> bool:
        return self.confirm is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.issue.to_dict(),
            "cause": self.cause,
            "package": self.package,
            "version": self.version.version,
            "version_from": self.version.source,
            "version_also": list(self.version.also),
            "matched": self.line,
            "strength": self.strength,
            "context": list(self.context),
            "possibly": self.possibly,
            "confirm": self.confirm,
            "kind": self.kind,
            "class": bool(self.fallback),
        }

    @property
    def strength_line(self) -> str:
        return self.strength + (f" ({'; '.join(self.context)})" if self.context else "")


#: what a class's match says instead of a verdict on the stack's versions
CLASS_SAID = (
    "a class of failures, named because nothing more specific shows: it says what kind of failure this was, not "
    "that a release has a bug; the cause ranks where to look"
)


def render_triage(matches: list[TriageMatch]) -> str:
    if not matches:
        return "no known issue matches this input"
    blocks = []
    for match in matches:
        issue = match.issue
        version = match.version.said
        lines = [
            f"[{issue.id}] {'possibly: ' if match.possibly else ''}{issue.title}",
            f"  matched:  {match.line}",
            f"  strength: {match.strength_line}",
            f"  by:       {MATCH_SAID.get(match.kind, match.kind)}",
            *([f"  confirm:  {match.confirm} (nothing in this input does)"] if match.possibly else []),
            (
                f"  kind:     {CLASS_SAID}"
                if match.fallback
                else f"  affected: {issue.affected_versions}; {match.package} {version} (from {match.version.source}): "
                f"{issue.verdict.value}" + (f"; fixed in {issue.fixed_in}" if issue.fixed_in else "")
            ),
            f"  cause:    {match.cause}",
            f"  remedy:   {issue.remedy}",
            *[f"  ref:      {ref}" for ref in issue.refs],
        ]
        blocks.append("\n".join(one_line(line) for line in lines))
    return "\n\n".join(blocks)


def render_triage_markdown(matches: list[TriageMatch], findings: Iterable[Finding] = ()) -> str:
    """What `triage --markdown` prints, to paste into a ticket: one section per known issue (how strong the match
    is among its first lines, so a reader weighs a message-only match as such), then the findings."""
    lines = ["## ds-doctor triage", ""]
    if not matches:
        lines += ["No known issue matches this input.", ""]
    for match in matches:
        issue = match.issue
        fixed = f"; fixed in {md_text(issue.fixed_in)}" if issue.fixed_in else ""
        lines += [
            f"### {'Possibly: ' if match.possibly else ''}{md_code(issue.id)} {md_text(issue.title)}",
            "",
            f"- **matched:** {md_code(match.line)}",
            f"- **strength:** {md_text(match.strength_line)}",
            f"- **matched by:** {md_text(MATCH_SAID.get(match.kind, match.kind))}",
            *(
                [f"- **confirm by:** {md_text(match.confirm or '')} (nothing in this input does)"]
                if match.possibly
                else []
            ),
            (
                f"- **kind:** {md_text(CLASS_SAID)}"
                if match.fallback
                else f"- **verdict:** {md_text(issue.verdict.value)}: {md_text(issue.affected_versions)}; "
                f"{md_text(match.package)} {md_text(match.version.said)} (from "
                f"{md_text(match.version.source)}){fixed}"
            ),
            f"- **cause:** {md_text(match.cause)}",
            f"- **remedy:** {md_text(issue.remedy)}",
            *[f"- {md_url(ref)}" for ref in issue.refs],
            "",
        ]
    found = [f"- **{f.severity.value}** {md_code(f.invariant)}: {md_text(f.message)}" for f in findings]
    return "\n".join(lines + (["### Findings", "", *found, ""] if found else [])).rstrip("\n") + "\n"


def render_versions(versions: Mapping[str, VersionUsed]) -> str:
    from_log = [f"{p} {v.said}" for p, v in sorted(versions.items()) if v.source == "the log"]
    here = [f"{p} {v.version}" for p, v in sorted(versions.items()) if v.source != "the log"]
    lines = []
    if from_log:
        lines.append("versions from the log: " + ", ".join(from_log))
    if here:
        lines.append("versions of this machine (the log names none): " + ", ".join(here))
    return "\n".join(one_line(line) for line in lines)


def render_findings(findings: Iterable[Finding]) -> str:
    return "\n".join(one_line(f"{f.severity.value.upper():7} {f.invariant}: {f.message}") for f in findings)


def render_positions(positions: Mapping[int, Iterable[CollectivePosition]]) -> str:
    rows = [
        one_line(f"  rank {rank}: {p.describe()}") for rank, items in sorted(positions.items()) for p in items
    ]
    return "\n".join(["where each rank stood:", *rows]) if rows else ""

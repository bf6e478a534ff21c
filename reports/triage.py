"""`ds-doctor triage` output: each known issue a user's log matched, as plain data and as text."""

from __future__ import annotations

import dataclasses
from typing import Any

from reports.records import IssueRef


@dataclasses.dataclass(frozen=True)
class TriageMatch:
    """One known issue found in a log: the issue with its verdict for the installed version, the line that matched."""

    issue: IssueRef
    package: str  # the distribution whose version decides the verdict
    cause: str
    installed: str | None
    position: int  # where its first pattern matched in the input
    line: str  # that line, scrubbed

    def to_dict(self) -> dict[str, Any]:
        return {**self.issue.to_dict(), "cause": self.cause, "installed": self.installed, "matched_line": self.line}


def render_triage(matches: list[TriageMatch]) -> str:
    if not matches:
        return "no known issue matches this input"
    blocks = []
    for match in matches:
        issue = match.issue
        installed = match.installed or "not installed"
        lines = [f"[{issue.id}] {issue.title}",
                 f"  matched:  {match.line}",
                 f"  affected: {issue.affected_versions}; installed {match.package} {installed}: {issue.verdict.value}"
                 + (f"; fixed in {issue.fixed_in}" if issue.fixed_in else ""),
                 f"  cause:    {match.cause}",
                 f"  remedy:   {issue.remedy}",
                 *[f"  ref:      {ref}" for ref in issue.refs]]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)

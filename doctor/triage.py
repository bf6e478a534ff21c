"""`ds-doctor triage`: match a user's log or traceback against every known issue.

For each hit: the issue, why it happens, the affected versions against the installed ones, the
remedy and the upstream references, and the line of the input that matched (scrubbed, since
people paste these into tickets). Hits are listed in the order their first match appears in the
input, because in a log the earliest error is usually the cause and later ones its echoes
(`ChildFailedError`, `'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from doctor import known_issues
from doctor.redact import scrub_text

MAX_INPUT_BYTES = 32 * 2**20  # a longer log is read from its tail
_FLAGS = re.MULTILINE | re.DOTALL


@dataclasses.dataclass(frozen=True)
class Match:
    issue: known_issues.KnownIssue
    verdict: str  # against the installed version: affected / not_affected / unknown
    installed: str | None
    position: int  # where its first pattern matched in the input
    line: str  # that line, scrubbed

    def to_dict(self) -> dict[str, Any]:
        ref = self.issue.to_ref(self.verdict)
        return {**ref, "cause": self.issue.cause, "installed": self.installed, "matched_line": self.line}


def first_match(issue: known_issues.KnownIssue, text: str) -> tuple[int, str] | None:
    """Position and line of the earliest pattern hit, or None."""
    spans = [m.start() for p in issue.patterns if (m := re.search(p, text, _FLAGS))]
    if not spans:
        return None
    start = min(spans)
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    return start, text[line_start: line_end if line_end != -1 else len(text)].strip()[:300]


def triage(text: str, versions: Mapping[str, str | None]) -> list[Match]:
    matches = []
    for issue in known_issues.classify(text):
        found = first_match(issue, text)
        if found is None:  # pragma: no cover - classify only returns issues whose patterns matched
            continue
        matches.append(Match(issue, issue.version_verdict(versions), versions.get(issue.package), found[0],
                             scrub_text(found[1])))
    return sorted(matches, key=lambda m: m.position)


def render(matches: list[Match]) -> str:
    if not matches:
        return "no known issue matches this input"
    blocks = []
    for match in matches:
        issue = match.issue
        affected = f"{issue.package} {issue.affected}" if issue.affected else f"{issue.package} (any version)"
        installed = match.installed or "not installed"
        lines = [f"[{issue.id}] {issue.title}",
                 f"  matched:  {match.line}",
                 f"  affected: {affected}; installed {issue.package} {installed}: {match.verdict}"
                 + (f"; fixed in {issue.fixed_in}" if issue.fixed_in else ""),
                 f"  cause:    {issue.cause}",
                 f"  remedy:   {issue.remedy}",
                 *[f"  ref:      {ref}" for ref in issue.refs]]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)

"""`ds-doctor triage`: match a user's log or traceback against every known issue.

For each hit: the issue, why it happens, the affected versions against the installed ones, the
remedy and the upstream references, and the line of the input that matched (scrubbed, since
people paste these into tickets). Hits are listed in the order their first match appears in the
input, because in a log the earliest error is usually the cause and later ones its echoes
(`ChildFailedError`, `'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from doctor.knowledge.catalog import classify
from doctor.knowledge.issues import KnownIssue
from doctor.redact import scrub_text
from reports.triage import TriageMatch

MAX_INPUT_BYTES = 32 * 2**20  # a longer log is read from its tail
_FLAGS = re.MULTILINE | re.DOTALL


def first_match(issue: KnownIssue, text: str) -> tuple[int, str] | None:
    """Position and line of the earliest pattern hit, or None."""
    spans = [m.start() for p in issue.patterns if (m := re.search(p, text, _FLAGS))]
    if not spans:
        return None
    start = min(spans)
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", start)
    return start, text[line_start: line_end if line_end != -1 else len(text)].strip()[:300]


def triage(text: str, versions: Mapping[str, str | None]) -> list[TriageMatch]:
    matches = []
    for issue in classify(text):
        found = first_match(issue, text)
        if found is None:  # pragma: no cover - classify only returns issues whose patterns matched
            continue
        matches.append(TriageMatch(issue.to_ref(issue.version_verdict(versions)), issue.package, issue.cause,
                                   versions.get(issue.package), found[0], scrub_text(found[1])))
    return sorted(matches, key=lambda m: m.position)

"""Secret scrubbing: applied once, where the report is built, to every string in it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

MASK = "<redacted>"

_KEYWORDS = r"(?:token|password|passwd|pwd|secret|api[-_]?key|apikey|access[-_]?key|auth|credentials?)"

# (pattern, replacement); a replacement keeps the non-secret context (flag name, URL scheme).
_PATTERNS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"), MASK),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}\b"), MASK),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), MASK),
    (re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"), MASK),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}"), MASK),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), MASK),
    (re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+@"), MASK + "@"),
    # --token=X, --password X, -p=... style flags
    (re.compile(rf"(?i)(--?[A-Za-z0-9_-]*{_KEYWORDS}[A-Za-z0-9_-]*)([=\s]+)(?!-)(\S+)"),
     lambda m: f"{m.group(1)}{m.group(2)}{MASK}"),
    # api_key=X, AWS_SECRET_ACCESS_KEY: X, "password": "X"
    (re.compile(rf"(?i)\b([A-Za-z0-9_.-]*{_KEYWORDS}[A-Za-z0-9_]*)(\"?\s*[=:]\s*[\"']?)([^\s\"',;&]+)"),
     lambda m: f"{m.group(1)}{m.group(2)}{MASK}"),
)

_SECRET_NAME = re.compile(rf"(?i){_KEYWORDS}|_KEY$|^KEY$")


def scrub_text(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)  # type: ignore[arg-type]
    return text


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def scrub(value: Any) -> Any:
    """A copy of `value` (JSON-like data) with every string scrubbed."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    return value

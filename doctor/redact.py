"""Secret scrubbing: applied once, where the report is built, to every string in it."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

MASK = "<redacted>"

_KEYWORDS = r"(?:token|password|passwd|pwd|secret|api[-_]?key|apikey|access[-_]?key|auth|credentials?)"

# (pattern, replacement); a replacement keeps the non-secret context (flag name, URL scheme).
_PATTERNS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S), MASK),
    (re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"), MASK),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"), MASK),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}\b"), MASK),
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"), MASK),  # GitLab
    (re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"), MASK),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), MASK),  # Google API keys
    (re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{20,}"), MASK),  # Stripe
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


#: Words that are never treated as a user or host name to hide (they would mangle ordinary text).
_COMMON = frozenset({"root", "user", "admin", "ubuntu", "localhost", "runner", "vm", "node", "host", "worker"})
_IPV4 = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)(?![\w.])")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}(?![\w:])")
_GPU_UUID = re.compile(r"\b(?:GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")


class Anonymizer:
    """`--anonymize`: host names, user names, IP addresses and GPU UUIDs become stable placeholders
    (`host-1`, `user-1`, `ip-1`, `gpu-uuid-1`), the same value the same placeholder throughout a report.
    Loopback addresses stay: they identify nothing. User names are replaced as path segments and as
    whole values; host names wherever they stand as a word."""

    def __init__(self, hosts: list[str], users: list[str]) -> None:
        self.hosts = sorted({h for h in hosts if h}, key=len, reverse=True)
        self.users = sorted({u for u in users if u}, key=len, reverse=True)
        self.seen: dict[tuple[str, str], str] = {}

    @classmethod
    def for_this_machine(cls, extra_hosts: list[str] = ()) -> Anonymizer:  # type: ignore[assignment]
        import getpass
        import socket

        hosts = [socket.gethostname(), socket.getfqdn(), socket.gethostname().split(".")[0], *extra_hosts]
        users = [os.environ.get("USER", ""), os.environ.get("LOGNAME", ""), Path.home().name]
        with contextlib.suppress(Exception):
            users.append(getpass.getuser())
        return cls(hosts, users)

    def _token(self, kind: str, value: str) -> str:
        key = (kind, value)
        if key not in self.seen:
            self.seen[key] = f"{kind}-{sum(1 for k, _ in self.seen if k == kind) + 1}"
        return self.seen[key]

    def text(self, text: str) -> str:
        text = _GPU_UUID.sub(lambda m: self._token("gpu-uuid", m.group(0)), text)
        text = _IPV4.sub(lambda m: m.group(0) if m.group(0).startswith("127.") else self._token("ip", m.group(0)), text)
        text = _IPV6.sub(lambda m: self._token("ip", m.group(0)), text)
        for host in self.hosts:
            if host.lower() in _COMMON and text != host:
                continue  # a common word: only a value that is exactly the host name is replaced
            text = re.sub(rf"(?<![A-Za-z0-9_.]){re.escape(host)}(?![A-Za-z0-9_])",
                          lambda _m, host=host: self._token("host", host), text)
        for user in self.users:
            if text == user:
                return self._token("user", user)
            text = re.sub(rf"(?<=/){re.escape(user)}(?=/|$|\s|[\"'])", lambda _m, user=user: self._token("user", user),
                          text)
        return text

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        return value

"""The catalog, measured: what an entry's reproducing case did here at a given release (`data/measured.toml`,
written by `make verify-catalog`, never by hand), and where that contradicts the entry's `affected` range.

A record is one run of the case on an overlay stack holding the release (`run --with`): `reproduced` (the case
was an xfail: it showed, the invariants caught it), `not_reproduced` (an xpass), or `does_not_import` (the
release does not import on this torch: it says nothing about the range). An issue that shows only on a GPU is
measured only there (`ds_doctor.releases.verify.PLAN` names each entry's case and the device it needs).
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

FORMAT = 1
OUTCOMES = ("reproduced", "not_reproduced", "does_not_import")
FIELDS = ("issue", "package", "version", "outcome", "case", "device", "torch", "date")
HEADER = """\
# The known-issue catalog, measured: each record is one run of an entry's reproducing case on an overlay stack
# holding the release (`ds-doctor run --with PKG==VER`). Written by `make verify-catalog`
# (python -m ds_doctor.releases.verify); never edited by hand. Read by doctor/knowledge/measured.py.

format = 1
"""


@dataclasses.dataclass(frozen=True)
class Measured:
    issue: str
    package: str
    version: str
    outcome: str  # one of OUTCOMES
    case: str
    device: str
    torch: str
    date: str

    def to_toml(self) -> str:
        return "\n[[measured]]\n" + "".join(f"{name} = '{getattr(self, name)}'\n" for name in FIELDS)


def parse(text: str, source: str = "measured.toml") -> tuple[Measured, ...]:
    data = tomllib.loads(text)
    if data.get("format") != FORMAT:
        raise ValueError(f"{source}: format {data.get('format')!r}, not {FORMAT}")
    records = []
    for index, raw in enumerate(data.get("measured", [])):
        if set(raw) != set(FIELDS) or not all(isinstance(raw[k], str) and raw[k] for k in FIELDS):
            raise ValueError(f"{source}: record {index + 1} needs exactly {', '.join(FIELDS)}, as strings")
        if raw["outcome"] not in OUTCOMES:
            raise ValueError(
                f"{source}: record {index + 1}: outcome {raw['outcome']!r} is not one of {OUTCOMES}"
            )
        Version(raw["version"])
        records.append(Measured(**raw))
    return tuple(records)


@functools.cache
def shipped() -> tuple[Measured, ...]:
    return parse((resources.files("ds_doctor.knowledge") / "data" / "measured.toml").read_text())


def for_issue(issue_id: str, records: Iterable[Measured] | None = None) -> tuple[Measured, ...]:
    return tuple(r for r in (shipped() if records is None else records) if r.issue == issue_id)


def contradictions(affected: Mapping[str, str], records: Iterable[Measured]) -> list[str]:
    """Records that disagree with their entry's `affected` range (issue id -> specifier; "" = every version):
    reproduced outside it, or not reproduced inside it."""
    out = []
    for record in records:
        if record.outcome == "does_not_import":
            continue
        if record.issue not in affected:
            out.append(f"{record.issue}: measured, but no such entry in the catalog")
            continue
        spec = affected[record.issue]
        inside = not spec or SpecifierSet(spec).contains(Version(record.version), prereleases=True)
        if inside != (record.outcome == "reproduced"):
            out.append(
                f"{record.issue}: {record.package} {record.version} {record.outcome.replace('_', ' ')} here "
                f"({record.device}, {record.date}, {record.case}), but the entry says affected {spec or 'always'}"
            )
    return out


def summary(records: Iterable[Measured]) -> dict[str, Any]:
    """Per issue: the versions measured and what each showed (for docs and the command's count)."""
    out: dict[str, dict[str, str]] = {}
    for record in records:
        out.setdefault(record.issue, {})[record.version] = record.outcome
    return out

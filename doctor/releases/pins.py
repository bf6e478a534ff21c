"""`run --with ... --ignore-pins`: the named releases over this stack although they declare it out of range.

Some releases can never be resolved against the stack a user has: Composer pins torch < 2.7.1, yet its FSDP path
is plain Python over torch's FSDP and runs on newer torch. To see what such a release does here, pip's `--no-deps`
install is the honest tool: the named releases exactly as named, and, of what they require, only what this stack
lacks altogether, resolved as usual (its own pins are kept). Every requirement the stack holds at a version the
release does not declare is listed as an ignored pin: the report says it, so no outcome on such an overlay is
mistaken for one on a supported stack.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ds_doctor.releases.overlay import (
    Overlay,
    Release,
    build,
    canonical,
    check_never_replaced,
    installed,
    pip_install_report,
)


def build_ignoring_pins(
    releases: tuple[Release, ...],
    find_links: Path | None = None,
    say: Callable[[str], object] = lambda _: None,
) -> Overlay:
    """The overlay of `releases` over this stack, their pins ignored (cached apart from a resolved one)."""
    return build(releases, find_links, say, ignoring_pins=resolve_ignoring_pins)


def resolve_ignoring_pins(
    releases: tuple[Release, ...],
    find_links: Path | None,
    report: Callable[[list[str], str], dict[str, Any]] | None = None,
) -> tuple[list[tuple[str, str, str]], tuple[str, ...]]:
    """What to install: (name, version, url) each, and the pins it ignores, one line each ("mosaicml 0.23.5 requires
    torch<2.3.2,>=2.1.2; this stack has 2.14.1")."""
    report = report or (lambda specs, what: _dry_run(specs, find_links, what))
    what = " ".join(r.spec for r in releases)
    named = _entries(report(["--no-deps", *(r.spec for r in releases)], what))
    versions = {name: version for name, version, _, _ in named}
    items = [(name, version, url) for name, version, url, _ in named]
    ignored: list[str] = []
    missing: dict[str, list[str]] = {}  # a requirement the stack lacks -> every range declared for it
    for name, version, _, requires in named:
        for requirement in _applicable(requires):
            dep = canonical(requirement.name)
            have = versions.get(dep) or installed(dep)
            if have is None:
                missing.setdefault(dep, []).extend(str(s) for s in requirement.specifier)
            elif requirement.specifier and not requirement.specifier.contains(have, prereleases=True):
                ignored.append(
                    f"{name} {version} requires {dep}{requirement.specifier}; this stack has {have}"
                )
    if missing:
        specs = [dep + ",".join(sorted(set(ranges))) for dep, ranges in sorted(missing.items())]
        extra = _entries(report(specs, f"{what} (what it needs that this stack lacks)"))
        items += [(name, version, url) for name, version, url, _ in extra if name not in versions]
    check_never_replaced(items, releases)
    return items, tuple(ignored)


def _applicable(requires: list[str]) -> list[Any]:
    """A release's requirements that apply here: no extra asked for, markers true on this interpreter."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for text in requires:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        out.append(requirement)
    return out


def _entries(data: dict[str, Any]) -> list[tuple[str, str, str, list[str]]]:
    out = []
    for item in data.get("install", []):
        meta, info = item.get("metadata") or {}, item.get("download_info") or {}
        out.append(
            (
                canonical(str(meta.get("name"))),
                str(meta.get("version")),
                str(info.get("url") or ""),
                [str(r) for r in meta.get("requires_dist") or []],
            )
        )
    return out


def _dry_run(specs: list[str], find_links: Path | None, what: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ds-doctor-resolve-") as scratch:
        path = Path(scratch) / "report.json"
        pip_install_report(specs, find_links, path, what)
        return json.loads(path.read_text())

"""`ds-doctor bisect`: the first release of a package where the selected cases change.

Given the cases (`-k`), a package, a release where they behave one way (`--good`) and one where they behave another
(`--bad`), the published releases between them are tried by binary search, each on an overlay (`--with`'s
machinery, ds_doctor.releases.overlay), the selected cases run on the overlay alone. A release's behaviour is each
case's outcome there; the search keeps the good end's behaviour on one side and looks for the first release that
differs from it. A release that does not install or import here is skipped, listed with pip's or the import's reason,
and the search goes on with its neighbours. This is how a known issue's range is measured rather than copied, and
what a ticket thread asks: "which release broke it?"

Releases come from `--find-links DIR` (the wheels and sdists there, no index) or from pip's index
(`pip index versions`). Pre-releases are left out unless an end is one.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from ds_doctor.releases.overlay import OverlayError, Release, canonical
from ds_doctor.reports.safe import md_cell, md_code, md_text

Runner = Callable[[Release], dict[str, str]]  # a release -> each selected case's outcome on it
PACKAGE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,200}[A-Za-z0-9])?")  # PEP 508's name, bounded
INDEX_TIMEOUT_S = 300


class BisectError(OverlayError):
    """What makes a bisection impossible: one line, exit code 2."""


@dataclasses.dataclass(frozen=True)
class Step:
    version: str
    outcomes: dict[str, str]  # case -> outcome on this release (empty where skipped)
    verdict: str  # "good" (the good end's behaviour), "changed", or "skipped"
    seconds: float
    reason: str | None = None  # why it was skipped

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Bisection:
    package: str
    keyword: str
    candidates: tuple[str, ...]
    steps: tuple[Step, ...]
    last_good: str
    first_changed: str

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "steps": [s.to_dict() for s in self.steps]}

    def summary(self) -> str:
        tried = len([s for s in self.steps if s.verdict != "skipped"])
        return (
            f"bisect {self.package}: the selected cases first change at {self.package} {self.first_changed} "
            f"(last release as at --good: {self.last_good}); {tried} release(s) run of {len(self.candidates)}"
        )


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise BisectError(f"{text!r} is not a release version") from None


def releases_in(folder: Path, package: str) -> list[str]:
    """The versions of `package` among the wheels and sdists in `folder`."""
    if not PACKAGE_NAME.fullmatch(package):
        raise BisectError(f"{package[:100]!r} is not a package name")
    name = canonicalize_name(package)
    found = set()
    for path in folder.iterdir():
        try:
            if path.name.endswith(".whl"):
                dist, version, _, _ = parse_wheel_filename(path.name)
            elif path.name.endswith((".tar.gz", ".zip")):
                dist, version = parse_sdist_filename(path.name)
            else:
                continue
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        if dist == name:
            found.add(str(version))
    return sorted(found, key=Version)


def releases_on_index(package: str) -> list[str]:
    """The versions pip's index lists for `package` (`pip index versions`)."""
    if not PACKAGE_NAME.fullmatch(package):
        raise BisectError(f"{package[:100]!r} is not a package name")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", package],
            capture_output=True,
            text=True,
            timeout=INDEX_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise BisectError(
            f"pip's index did not list {package}'s releases within {INDEX_TIMEOUT_S} s"
        ) from None
    match = re.search(r"Available versions:\s*(.+)", proc.stdout)
    if proc.returncode != 0 or not match:
        reason = " ".join((proc.stderr or proc.stdout).split())[-300:]
        raise BisectError(f"pip lists no releases of {package}: {reason}")
    return sorted({v.strip() for v in match.group(1).split(",") if v.strip()}, key=Version)


def between(versions: list[str], good: str, bad: str) -> list[str]:
    """The releases from `good` to `bad` (either may be the older), both ends included, in that direction."""
    low, high = sorted((_version(good), _version(bad)))
    keep_pre = low.is_prerelease or high.is_prerelease
    inside = [v for v in versions if low <= Version(v) <= high and (keep_pre or not Version(v).is_prerelease)]
    for end in (good, bad):
        if not any(Version(v) == Version(end) for v in inside):
            raise BisectError(
                f"{end} is not among the releases found ({', '.join(versions[-12:]) or 'none'})"
            )
    return inside if _version(good) < _version(bad) else inside[::-1]


def _step(runner: Runner, package: str, version: str, good: dict[str, str] | None) -> Step:
    started = time.monotonic()
    try:
        outcomes = runner(Release(canonical(package), version))
    except OverlayError as exc:
        return Step(version, {}, "skipped", round(time.monotonic() - started, 1), str(exc.message))
    verdict = "good" if good is None or outcomes == good else "changed"
    return Step(version, outcomes, verdict, round(time.monotonic() - started, 1))


def bisect(
    package: str,
    keyword: str,
    candidates: list[str],
    runner: Runner,
    say: Callable[[str], object] = lambda _: None,
) -> Bisection:
    """The first release after `candidates[0]` (the good end) whose outcomes differ from it; `candidates[-1]` is the
    bad end. Each tried release is said as it finishes."""

    def run(version: str, good: dict[str, str] | None) -> Step:
        step = _step(runner, package, version, good)
        steps.append(step)
        said = ", ".join(f"{case} {outcome}" for case, outcome in sorted(step.outcomes.items()))
        say(f"bisect: {package}=={version}: {step.verdict}" + (f" ({said})" if said else f": {step.reason}"))
        return step

    steps: list[Step] = []
    good = run(candidates[0], None)
    if good.verdict == "skipped":
        raise BisectError(f"--good {candidates[0]} does not run here: {good.reason}")
    bad = run(candidates[-1], good.outcomes)
    if bad.verdict == "skipped":
        raise BisectError(f"--bad {candidates[-1]} does not run here: {bad.reason}")
    if bad.verdict == "good":
        raise BisectError(
            f"the selected cases end the same at {candidates[0]} and {candidates[-1]}: nothing to bisect"
        )
    live = list(candidates)
    low, high = 0, len(live) - 1
    while high - low > 1:
        mid = (low + high) // 2
        step = run(live[mid], good.outcomes)
        if step.verdict == "skipped":
            del live[mid]
            high -= 1
        elif step.verdict == "good":
            low = mid
        else:
            high = mid
    return Bisection(canonical(package), keyword, tuple(candidates), tuple(steps), live[low], live[high])


def render_bisection(found: Bisection) -> str:
    """Markdown: the answer, then every release tried in the order it was, with each case's outcome."""
    cases = sorted({case for step in found.steps for case in step.outcomes})
    lines = [
        f"# ds-doctor bisect — {md_text(found.package)}",
        "",
        f"**{md_text(found.summary())}.**",
        "",
        f"Cases: {md_code('-k ' + found.keyword)}. Releases between the ends: {md_text(', '.join(found.candidates))}.",
        "",
        "| release | verdict | seconds | " + " | ".join(md_code(case) for case in cases) + " |",
        "|---|---|---|" + "---|" * len(cases),
    ]
    for step in sorted(found.steps, key=lambda s: found.candidates.index(s.version)):
        cells = [step.outcomes.get(case, "-") for case in cases]
        if step.verdict == "skipped" and cases:
            cells = [f"skipped: {step.reason}"] + [""] * (len(cases) - 1)
        row = [step.version, step.verdict, f"{step.seconds:.1f}", *cells]
        lines.append("| " + " | ".join(md_cell(cell) for cell in row) + " |")
    return "\n".join(lines) + "\n"

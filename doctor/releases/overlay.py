"""`run --with PKG==VER`: the named releases installed into a cache folder of their own, first on the ranks' path.

An overlay is resolved against the stack as installed (`pip install --dry-run --report`, which sees what the
environment holds): only the named releases and whatever of their requirements the environment does not satisfy
go into it, each exactly as resolved, with `--no-deps` and without build isolation (a release built from source
builds against this torch). torch is never replaced unless it is named. The overlay lands in
`~/.cache/ds-doctor/releases/<key>/` (`DS_DOCTOR_STACKS` moves it), the key hashing the Python, the releases, where
they come from and the installed torch, and is reused while it holds a finished marker; it is checked to import
before any case runs. Nothing is installed into the user's environment.

Every way an overlay cannot be had is an `OverlayError`: one line (pip's own reason where pip gave one), exit 2.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from ds_doctor.files import untrusted_folder
from ds_doctor.reports.safe import one_line

CACHE_ENV = "DS_DOCTOR_STACKS"
MARKER = "ds-doctor-overlay.json"
PIP_TIMEOUT_S = 1800.0  # a release built from source (DeepSpeed's sdist) takes minutes
IMPORT_TIMEOUT_S = 180.0
# replaced only where named: a CUDA build is several GB, and every case depends on it
NEVER_REPLACED = ("torch",)
MAX_RELEASES = 16


class OverlayError(click.UsageError):
    """A release that cannot be overlaid here: one line, exit code 2."""


@dataclasses.dataclass(frozen=True)
class Release:
    name: str  # canonical distribution name
    version: str

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


@dataclasses.dataclass(frozen=True)
class Overlay:
    releases: tuple[Release, ...]
    path: Path
    packages: dict[str, str]  # everything the overlay holds, canonical name -> version
    ignored_pins: tuple[str, ...] = ()  # --ignore-pins: each requirement this stack does not meet, one line

    @property
    def name(self) -> str:
        return "+".join(r.spec for r in self.releases)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "with": [r.spec for r in self.releases],
            "packages": dict(self.packages),
            "path": str(self.path),
        }
        if self.ignored_pins:
            out["ignored_pins"] = list(self.ignored_pins)
        return out


def canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def parse_release(text: str) -> Release:
    """`PKG==VER` (one exact version; no extras, markers or URLs), or OverlayError."""
    from packaging.requirements import InvalidRequirement, Requirement

    said = f"--with {one_line(text)[:200]!r}"
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        raise OverlayError(f"{said}: not a release (write PKG==VERSION, e.g. deepspeed==0.14.2)") from None
    specifiers = list(requirement.specifier)
    if (
        requirement.extras
        or requirement.marker
        or requirement.url
        or len(specifiers) != 1
        or specifiers[0].operator != "=="
        or "*" in specifiers[0].version
    ):
        raise OverlayError(
            f"{said}: name one exact release, PKG==VERSION (no ranges, extras, markers or URLs)"
        )
    return Release(canonical(requirement.name), specifiers[0].version)


def parse_releases(texts: Sequence[str]) -> tuple[Release, ...]:
    if len(texts) > MAX_RELEASES:
        raise OverlayError(f"--with: {len(texts)} releases, more than the {MAX_RELEASES} one overlay takes")
    releases = tuple(parse_release(t) for t in texts)
    names = [r.name for r in releases]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise OverlayError(f"--with names {', '.join(twice)} more than once")
    return releases


def installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "ds-doctor" / "stacks").expanduser()


def source_args(find_links: Path | None) -> list[str]:
    """Where releases come from: the index pip is configured with, or only the folder of `--find-links`."""
    return ["--no-index", "--find-links", str(find_links)] if find_links is not None else []


def _pip(args: list[str], what: str) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", *args],
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
    except subprocess.TimeoutExpired:
        raise OverlayError(f"--with {what}: pip did not finish within {PIP_TIMEOUT_S:g} s") from None
    if proc.returncode != 0:
        said = f"{proc.stderr}\n{proc.stdout}"  # pip prints why a resolution conflicts on stdout
        raise OverlayError(f"--with {what}: pip cannot install it: {pip_reason(said)}")
    return proc


#: pip's ERROR lines that are notices about versions it passed over (yanked ones, ones for another Python), which
#: come before the reason it failed
PIP_NOTICES = ("Ignored the following",)
#: pip's reasons for a release it cannot find, most telling first (the first lists the versions it did find)
PIP_NOT_FOUND = (
    "Could not find a version that satisfies the requirement",
    "No matching distribution found for",
)
_FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")


def shorter_versions(line: str, keep: int = 3) -> str:
    """pip's `(from versions: ...)` cut to its first and last `keep` (DeepSpeed has well over a hundred)."""

    def cut(match: re.Match[str]) -> str:
        versions = [v.strip() for v in match.group(1).split(",") if v.strip()]
        if len(versions) <= 2 * keep + 1:
            return match.group(0)
        shown = ", ".join(versions[:keep]) + " … " + ", ".join(versions[-keep:])
        return f"(from versions: {shown}; {len(versions)} in all)"

    return _FROM_VERSIONS.sub(cut, line)


def pip_error(lines: list[str]) -> str | None:
    """The ERROR line that says why: a release not found first, then any other that is no notice."""
    errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR:")]
    for wanted in PIP_NOT_FOUND:
        found = next((error for error in errors if error.startswith(wanted)), None)
        if found is not None:
            return found
    return next((e for e in errors if not e.startswith(PIP_NOTICES)), errors[0] if errors else None)


def pip_reason(stderr: str) -> str:
    """pip's reason in one line: the ERROR line that names the release and the versions pip found (not a notice
    such as `Ignored the following yanked versions`, which comes first)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    reason = shorter_versions(pip_error(lines) or (lines[-1:] or ["(no output)"])[0])
    if "The conflict is caused by:" in lines:  # which requirement conflicts, not only that one does
        start = lines.index("The conflict is caused by:") + 1
        causes = [line for line in lines[start : start + 4] if " depends on " in line or "requested" in line]
        reason = f"{reason.rstrip('.')}: {'; '.join(causes)} (--ignore-pins installs it anyway)"
    return one_line(reason)[:400]


def resolve(releases: tuple[Release, ...], find_links: Path | None) -> list[tuple[str, str, str]]:
    """What pip would install on top of this environment for the releases: (name, version, url) each."""
    what = " ".join(r.spec for r in releases)
    with tempfile.TemporaryDirectory(prefix="ds-doctor-resolve-") as scratch:
        report = Path(scratch) / "report.json"
        pip_install_report([r.spec for r in releases], find_links, report, what)
        data = json.loads(report.read_text())
    items = []
    for item in data.get("install", []):
        meta, info = item.get("metadata") or {}, item.get("download_info") or {}
        items.append((canonical(str(meta.get("name"))), str(meta.get("version")), str(info.get("url") or "")))
    check_never_replaced(items, releases)
    return items


def pip_install_report(specs: list[str], find_links: Path | None, report: Path, what: str) -> None:
    """pip's dry-run resolution of `specs` on top of this environment, written as its JSON report to `report`."""
    _pip(
        [
            "install",
            "--dry-run",
            "--no-build-isolation",
            "--report",
            str(report),  # not quiet: pip says why
            *source_args(find_links),
            *specs,
        ],
        what,
    )


def check_never_replaced(items: list[tuple[str, str, str]], releases: tuple[Release, ...]) -> None:
    """OverlayError where the resolution would replace torch (or another of NEVER_REPLACED) that was not named."""
    named = {r.name for r in releases}
    for name, version, _ in items:
        if name in NEVER_REPLACED and name not in named:
            raise OverlayError(
                f"--with {' '.join(r.spec for r in releases)}: needs {name} {version} (installed: "
                f"{installed(name)}); name --with {name}==... to replace it"
            )


def top_level_modules(folder: Path, name: str) -> list[str]:
    """The modules a distribution installed into `folder` provides (top_level.txt, else its RECORD)."""
    for dist in importlib.metadata.distributions(path=[str(folder)]):
        if canonical(dist.metadata["Name"] or "") != name:
            continue
        listed = (dist.read_text("top_level.txt") or "").split()
        if listed:
            return listed
        tops = {Path(str(f)).parts[0] for f in dist.files or () if Path(str(f)).parts}
        return sorted(
            t.removesuffix(".py")
            for t in tops
            if not t.endswith((".dist-info", ".data"))
            and t not in ("..", "bin", "__pycache__")
            and (t.endswith(".py") or (folder / t).is_dir())
        )
    return []


def check_imports(folder: Path, releases: tuple[Release, ...]) -> None:
    """Each named release imports from the overlay on this stack, in a child process, or OverlayError naming the
    module and why."""
    env = {**os.environ, "PYTHONPATH": prepended(folder)}
    for release in releases:
        for module in top_level_modules(folder, release.name)[:8]:
            try:
                proc = subprocess.run(
                    [sys.executable, "-c", f"import {module}"],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=IMPORT_TIMEOUT_S,
                    cwd=folder,
                )
            except subprocess.TimeoutExpired:
                raise OverlayError(
                    f"--with {release.spec}: import {module} did not finish within "
                    f"{IMPORT_TIMEOUT_S:g} s on this stack"
                ) from None
            if proc.returncode != 0:
                last = [line for line in proc.stderr.splitlines() if line.strip()][-1:] or ["(no output)"]
                raise OverlayError(
                    f"--with {release.spec}: does not import on this stack: import {module}: "
                    f"{one_line(last[0])[:300]}"
                )


def prepended(folder: Path) -> str:
    """This process's PYTHONPATH with `folder` first: what a child started with it imports from the folder first."""
    return os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))


def refuse_untrusted_root(root: Path) -> None:
    """The cache folder itself: another user who can write there could plant an overlay at a key (predictable) whose
    sitecustomize.py every rank runs. One line, exit 2."""
    why = untrusted_folder(root.resolve())
    if why is not None:
        raise OverlayError(
            f"the overlay cache {root} cannot be trusted: {why}; set {CACHE_ENV} to a folder only you can write"
        )


def from_cache(
    releases: tuple[Release, ...], root: Path, target: Path, say: Callable[[str], object]
) -> Overlay | None:
    """The finished overlay at `target`, when it is ours to trust: the cache and the overlay folders only this user
    can write, a marker of ours, and every release it names installed there with its files as their RECORD lists
    them (hash and size). Else None, after saying why a folder that is there is built again."""
    marker = target / MARKER
    if not marker.is_file():
        return None
    refuse_untrusted_root(root)
    why = untrusted_folder(target)
    overlay = None
    if why is None:
        try:
            data = json.loads(marker.read_text())
            overlay = Overlay(
                releases,
                target,
                {str(k): str(v) for k, v in data["packages"].items()},
                tuple(str(line) for line in data.get("ignored_pins", ())),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            why = f"its marker {marker} is not ours"
    if overlay is not None:
        why = not_installed_as_recorded(target, overlay.packages)
    if why is None:
        return overlay
    say(f"ds-doctor: building the overlay at {target} again: {why}")
    shutil.rmtree(target, ignore_errors=True)
    return None


def not_installed_as_recorded(folder: Path, packages: dict[str, str]) -> str | None:
    """Why the releases a marker names are not what `folder` holds, or None: each one's metadata (name and version)
    is there, and every file its RECORD lists with a hash has that hash and size."""
    found = {
        canonical(dist.metadata["Name"] or ""): dist
        for dist in importlib.metadata.distributions(path=[str(folder)])
    }
    for name, version in packages.items():
        dist = found.get(canonical(name))
        if dist is None or dist.version != version:
            return f"{name} {version} is not installed there"
        for entry in dist.files or ():
            if entry.hash is None or entry.parts[0] == "..":
                continue  # RECORD itself, .pyc files written later, scripts (pip --target puts them elsewhere)
            path = Path(str(entry.locate()))
            try:
                data = path.read_bytes()
            except OSError:
                return f"{name} {version}: {entry} is missing"
            digest = (
                base64.urlsafe_b64encode(hashlib.new(entry.hash.mode, data).digest()).rstrip(b"=").decode()
            )
            if digest != entry.hash.value or (entry.size is not None and entry.size != len(data)):
                return f"{name} {version}: {entry} is not the file its RECORD lists"
    return None


def key_of(releases: tuple[Release, ...], find_links: Path | None, ignore_pins: bool = False) -> str:
    facts = [
        sys.version,
        sys.prefix,
        sorted(r.spec for r in releases),
        str(find_links.resolve()) if find_links else None,
        {name: installed(name) for name in NEVER_REPLACED},
        *(["ignore-pins"] if ignore_pins else []),
    ]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


#: how an overlay's contents are resolved: (what to install as (name, version, url) each, the pins it ignores)
Resolver = Callable[[tuple[Release, ...], "Path | None"], tuple[list[tuple[str, str, str]], tuple[str, ...]]]


def build(
    releases: tuple[Release, ...],
    find_links: Path | None = None,
    say: Callable[[str], object] = lambda _: None,
    ignoring_pins: Resolver | None = None,
) -> Overlay:
    """The overlay for `releases`: from the cache when it is there and finished, else resolved, installed and
    checked (progress through `say`). `ignoring_pins` resolves it instead (ds_doctor.releases.pins)."""
    ignore_pins = ignoring_pins is not None
    if find_links is not None and not find_links.is_dir():
        raise OverlayError(f"--find-links {one_line(str(find_links))[:300]}: not a folder")
    root = cache_root()
    target = root / key_of(releases, find_links, ignore_pins)
    cached = from_cache(releases, root, target, say)
    if cached is not None:
        return cached
    what = " ".join(r.spec for r in releases)
    say(
        f"ds-doctor: building the overlay {what} (resolved against this environment"
        f"{', its pins ignored' if ignore_pins else ''}, into {target})"
    )
    items, ignored = (
        ignoring_pins(releases, find_links) if ignoring_pins else (resolve(releases, find_links), ())
    )
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise OverlayError(
            f"{root}: cannot create the overlay cache ({exc.strerror}); set {CACHE_ENV}"
        ) from None
    refuse_untrusted_root(root)
    building = Path(tempfile.mkdtemp(prefix=".building-", dir=root))
    try:
        say(f"ds-doctor: installing {', '.join(f'{n} {v}' for n, v, _ in items)}")
        _pip(
            [
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--target",
                str(building),
                *source_args(find_links),
                *(url or f"{name}=={version}" for name, version, url in items),
            ],
            what,
        )
        check_imports(building, releases)
        packages = {name: version for name, version, _ in items}
        (building / MARKER).write_text(
            json.dumps(
                {"with": [r.spec for r in releases], "packages": packages, "ignored_pins": list(ignored)}
            )
        )
        shutil.rmtree(target, ignore_errors=True)  # an unfinished one, from a build that was killed
        os.replace(building, target)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return Overlay(releases, target, packages, ignored)

"""Installed pairs of the training stack outside each other's declared ranges, read from the distributions' own
metadata (Requires-Dist): transformers declares the Accelerate it needs, Accelerate and DeepSpeed the torch.

A pair out of range is how `'AcceleratorState' object has no attribute 'distributed_type'` and its kind start, and
nothing says so until the code path that needs the newer API runs. Read without importing anything (metadata
only), so `ds-doctor env` stays fast. Extras count (transformers declares Accelerate under its `torch` and
`accelerate` extras) except the ones for developing the package itself; where several requirements name the same
package, the installed version is out of range only when it satisfies none of them, so a loose extra never raises a
false alarm.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

#: the packages whose declared ranges on each other are checked
STACK = ("torch", "deepspeed", "accelerate", "transformers", "numpy")
#: extras that install a package's own test and build tools, not what it needs to run
DEV_EXTRAS = frozenset(
    {
        "dev",
        "dev-torch",
        "testing",
        "test",
        "tests",
        "test-dev",
        "quality",
        "docs",
        "all",
        "readthedocs",
        "deepspeed-testing",
        "sagemaker",
        "benchmark",
    }
)


def _applies(requirement: Requirement, extras: Iterable[str]) -> bool:
    """Whether a requirement holds on this interpreter without an extra, or with one of the runtime `extras`."""
    if requirement.marker is None:
        return True
    try:
        return any(requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras))
    except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
        return False


def declared(package: str, path: list[str] | None = None) -> list[Requirement]:
    """What an installed distribution declares of the rest of the stack (empty where it is not installed); `path`
    looks in those folders instead of sys.path."""
    dist = next(iter(metadata.distributions(name=package, path=path if path is not None else sys.path)), None)
    if dist is None:
        return []
    lines = dist.requires or []
    extras = [
        e for e in dist.metadata.get_all("Provides-Extra") or [] if canonicalize_name(e) not in DEV_EXTRAS
    ]
    stack = {canonicalize_name(name) for name in STACK}
    out = []
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if (
            canonicalize_name(requirement.name) in stack
            and requirement.specifier
            and _applies(requirement, extras)
        ):
            out.append(requirement)
    return out


def out_of_range(
    versions: Mapping[str, str | None], requirements: Mapping[str, Iterable[Requirement]]
) -> list[dict[str, Any]]:
    """Each (declarer, required) pair whose installed version satisfies none of the declarer's ranges for it."""
    found = []
    for declarer, reqs in requirements.items():
        by_name: dict[str, list[Requirement]] = {}
        for requirement in reqs:
            by_name.setdefault(canonicalize_name(requirement.name), []).append(requirement)
        for name, group in sorted(by_name.items()):
            installed = versions.get(name)
            if not installed or not versions.get(declarer):
                continue
            try:
                version = Version(installed)
            except InvalidVersion:
                continue
            public = Version(version.public)  # "2.13.0+cpu" is 2.13.0 to a range
            if not any(r.specifier.contains(public, prereleases=True) for r in group):
                found.append(
                    {
                        "package": declarer,
                        "version": versions[declarer],
                        "requires": name,
                        "declared": " or ".join(sorted({str(r.specifier) for r in group})),
                        "installed": installed,
                    }
                )
    return found


def version_skew(versions: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """The installed stack's pairs out of each other's declared ranges (the `version_skew` of the env section)."""
    return out_of_range(versions, {name: declared(name) for name in STACK if versions.get(name)})

"""Node rules over the environment section (package versions, no torch import): what will break a job on this
node although nothing has run yet. They make one `environment[node]` result, at every level, when they find
something."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ds_doctor.reports.model import CaseResult, Finding, Outcome, Severity

PROBE = "environment"


def numpy_present(env: Mapping[str, Any]) -> list[Finding]:
    """torch runs without numpy, but its object collectives and `.numpy()` do not."""
    packages = env.get("packages") or {}
    if not packages.get("torch") or packages.get("numpy"):
        return []
    return [
        Finding(
            "numpy_present",
            Severity.WARNING,
            "numpy is not installed: torch imports without it, but torch.distributed's object collectives "
            '(all_gather_object, broadcast_object_list) and .numpy() raise "Numpy is not available"',
            stage="environment",
            expected="numpy installed beside torch",
            remedy="pip install numpy (a version your torch supports; numpy >= 2 needs torch >= 2.3), "
            "the same on every node",
        )
    ]


def declared_ranges(env: Mapping[str, Any]) -> list[Finding]:
    """Installed pairs outside each other's declared ranges (ds_doctor.hardware.skew): transformers, Accelerate and
    DeepSpeed out of step fail late, on the first code path that needs the other's newer API."""
    return [
        Finding(
            "declared_ranges",
            Severity.WARNING,
            f"{pair['package']} {pair['version']} declares {pair['requires']}{pair['declared']}, and "
            f"{pair['requires']} {pair['installed']} is installed",
            stage="environment",
            expected=f"{pair['requires']}{pair['declared']}",
            remedy=f"pip install '{pair['requires']}{pair['declared'].split(' or ')[0]}' (or a "
            f"{pair['package']} release whose range holds {pair['requires']} {pair['installed']})",
        )
        for pair in env.get("version_skew") or ()
        if isinstance(pair, Mapping)
    ]


RULES = (numpy_present, declared_ranges)


def environment_results(env: Mapping[str, Any]) -> list[CaseResult]:
    """One `environment[node]` result when a rule has something to say (warnings pass; an error fails)."""
    findings = [finding for rule in RULES for finding in rule(env)]
    if not findings:
        return []
    errors = [f.message for f in findings if f.is_error]
    return [
        CaseResult(
            probe=PROBE,
            case=f"{PROBE}[node]",
            scenario="smoke",
            level=1,
            world_size=1,
            device_kind="cpu",
            outcome=Outcome.FAIL if errors else Outcome.PASS,
            duration_s=0.0,
            reason="; ".join(errors) or None,
            findings=tuple(findings),
        )
    ]

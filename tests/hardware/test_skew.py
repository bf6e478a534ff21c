"""Installed pairs out of each other's declared ranges, read from real Requires-Dist lines (transformers 4.30.2's
own METADATA, trimmed to its header) through importlib.metadata, as `ds-doctor env` and level 1 read them."""

from __future__ import annotations

from pathlib import Path

from ds_doctor.checks.environment import declared_ranges, environment_results
from ds_doctor.hardware.skew import declared, out_of_range, version_skew
from ds_doctor.reports.model import Outcome, Severity

#: the header of transformers-4.30.2.dist-info/METADATA (the wheel on PyPI), the lines naming the stack
TRANSFORMERS_4_30_2 = """Metadata-Version: 2.1
Name: transformers
Version: 4.30.2
Provides-Extra: accelerate
Requires-Dist: accelerate (>=0.20.2) ; extra == 'accelerate'
Provides-Extra: deepspeed
Requires-Dist: accelerate (>=0.20.2) ; extra == 'deepspeed'
Requires-Dist: deepspeed (>=0.8.3) ; extra == 'deepspeed'
Provides-Extra: dev
Requires-Dist: accelerate (>=0.20.2) ; extra == 'dev'
Requires-Dist: numpy (>=1.17)
Requires-Dist: tokenizers (!=0.11.3,<0.14,>=0.11.1)
"""


def site(tmp_path: Path, name: str, version: str, metadata: str) -> list[str]:
    info = tmp_path / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(metadata)
    return [str(tmp_path)]


def test_the_declared_ranges_are_read_from_the_metadata(tmp_path: Path) -> None:
    path = site(tmp_path, "transformers", "4.30.2", TRANSFORMERS_4_30_2)
    # the dev extra and tokenizers are not the stack
    assert sorted(str(r) for r in declared("transformers", path)) == sorted(
        [
            'accelerate>=0.20.2; extra == "accelerate"',
            'accelerate>=0.20.2; extra == "deepspeed"',
            'deepspeed>=0.8.3; extra == "deepspeed"',
            "numpy>=1.17",
        ]
    )
    assert declared("not-installed-anywhere", path) == []


def test_a_pair_out_of_range_names_both_versions_and_the_range(tmp_path: Path) -> None:
    requirements = {
        "transformers": declared(
            "transformers", site(tmp_path, "transformers", "4.30.2", TRANSFORMERS_4_30_2)
        )
    }
    versions = {"transformers": "4.30.2", "accelerate": "0.18.0", "deepspeed": "0.9.5", "numpy": "1.26.4"}
    assert out_of_range(versions, requirements) == [
        {
            "package": "transformers",
            "version": "4.30.2",
            "requires": "accelerate",
            "declared": ">=0.20.2",
            "installed": "0.18.0",
        }
    ]
    assert out_of_range({**versions, "accelerate": "0.20.3"}, requirements) == []
    # not installed: nothing to compare
    assert out_of_range({**versions, "accelerate": None}, requirements) == []
    assert out_of_range({**versions, "deepspeed": "0.8.0"}, requirements)[1]["requires"] == "deepspeed"


def test_a_local_version_is_judged_by_its_public_part() -> None:
    from packaging.requirements import Requirement

    assert (
        out_of_range(
            {"accelerate": "1.15.0", "torch": "2.13.0+cpu"}, {"accelerate": [Requirement("torch>=2.0.0")]}
        )
        == []
    )


def test_this_machine_has_no_pair_out_of_range() -> None:
    """The stack installed here (torch 2.13, deepspeed 0.19.8, accelerate 1.15, transformers 5.23) agrees."""
    from ds_doctor.hardware.env import package_versions

    assert version_skew(package_versions()) == []


def test_level_1_warns_of_a_pair_out_of_range() -> None:
    pair = {
        "package": "transformers",
        "version": "4.30.2",
        "requires": "accelerate",
        "declared": ">=0.20.2",
        "installed": "0.18.0",
    }
    (finding,) = declared_ranges({"version_skew": [pair]})
    assert (finding.invariant, finding.severity) == ("declared_ranges", Severity.WARNING)
    assert (
        finding.message
        == "transformers 4.30.2 declares accelerate>=0.20.2, and accelerate 0.18.0 is installed"
    )
    assert "pip install 'accelerate>=0.20.2'" in finding.remedy
    (result,) = environment_results(
        {"packages": {"torch": "2.13.0", "numpy": "2.3.1"}, "version_skew": [pair]}
    )
    assert (result.case, result.outcome) == ("environment[node]", Outcome.PASS)
    # an older report has no such key
    assert declared_ranges({"version_skew": []}) == declared_ranges({}) == []


def test_ds_doctor_env_prints_a_pair_out_of_range() -> None:
    from ds_doctor.reports.console import environment_lines

    env = {
        "python": "3.11",
        "platform": "linux",
        "cuda": None,
        "nccl": None,
        "driver": None,
        "cuda_driver": None,
        "packages": {"accelerate": "0.18.0"},
        "variables": {},
        "version_skew": [
            {
                "package": "transformers",
                "version": "4.30.2",
                "requires": "accelerate",
                "declared": ">=0.20.2",
                "installed": "0.18.0",
            }
        ],
    }
    hardware = {"host": "h", "cpus": 2, "memory_bytes": 0, "gpus": [], "gpus_reason": "none"}
    assert (
        "out of declared range: transformers 4.30.2 declares accelerate>=0.20.2; accelerate 0.18.0 is installed"
        in environment_lines(env, hardware)
    )

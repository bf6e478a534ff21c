"""One distribution, one import name: setup.cfg installs the folders the product names (`doctor/`, `probes/`,
`reports/`) as `ds_doctor`, `ds_doctor.probes` and `ds_doctor.reports`, and lists every package below them."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def listed(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_every_package_of_the_tree_is_installed_under_the_one_name() -> None:
    """A subpackage added to the tree but not to setup.cfg would import from a checkout and be missing from the
    wheel: the list is held to the tree."""
    config = setup_cfg()
    roots = dict(line.split(" = ") for line in listed(config["options"]["package_dir"]))
    assert roots == {"ds_doctor": "doctor", "ds_doctor.probes": "probes", "ds_doctor.reports": "reports"}
    in_tree = {
        ".".join([name, *init.parent.relative_to(ROOT / folder).parts])
        for name, folder in roots.items()
        for init in (ROOT / folder).rglob("__init__.py")
    }
    assert set(listed(config["options"]["packages"])) == in_tree
    assert {name.split(".")[0] for name in in_tree} == {"ds_doctor"}  # one top-level import name


def test_the_entry_point_and_the_version_name_the_one_package() -> None:
    config = setup_cfg()
    assert config["metadata"]["version"] == "attr: ds_doctor.__version__"
    assert listed(config["options.entry_points"]["console_scripts"]) == ["ds-doctor = ds_doctor.cli:main"]
    assert set(config["options.package_data"]) == {
        "ds_doctor.reports",
        "ds_doctor.knowledge",
        "ds_doctor.probes.equivalence",
    }

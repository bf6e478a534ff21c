"""Every `ds_doctor` import resolves to a file of this checkout, by the one mapping docs/architecture.md gives
("One import name": `ds_doctor` is doctor/, `ds_doctor.probes` probes/, `ds_doctor.reports` reports/), so a reader
or a tool that maps a dotted name to a path by that rule never meets a name without a file."""

from __future__ import annotations

import ast
import configparser
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_layout import PACKAGES, ROOT

#: where imports are read: the sources, the tests, the benches and the docs' scripts
READ = ("doctor", "probes", "reports", "tests", "bench", "docs")


def path_of(dotted: str) -> Path | None:
    """The file a dotted name is, by the mapping (the longest package prefix wins); None where there is none."""
    for folder, name in sorted(PACKAGES.items(), key=lambda item: -len(item[1])):
        if dotted == name or dotted.startswith(name + "."):
            rest = dotted[len(name) :].lstrip(".").split(".") if dotted != name else []
            base = ROOT / folder / Path(*rest) if rest else ROOT / folder
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file():
                    return candidate
            return None
    return None


def ds_imports(path: Path) -> Iterator[tuple[int, str, list[str]]]:
    """Each absolute `ds_doctor` import of a file: its line, the module, the names taken from it."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "ds_doctor":
                    yield node.lineno, alias.name, []
        elif (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").split(".")[0] == "ds_doctor"
        ):
            yield node.lineno, node.module or "", [alias.name for alias in node.names]


def unresolved(path: Path) -> list[str]:
    """The imports of a file whose module has no file by the mapping (the names taken from a module that has one
    are mypy's to check: `make lint` fails on a name a module lacks)."""
    return [
        f"{path.relative_to(ROOT)}:{line}: {module} has no file"
        for line, module, _ in ds_imports(path)
        if path_of(module) is None
    ]


def sources() -> list[Path]:
    return sorted(p for folder in READ for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def test_the_mapping_finds_files_and_refuses_names_without_one() -> None:
    assert path_of("ds_doctor.run.merge") == ROOT / "doctor" / "run" / "merge.py"
    assert path_of("ds_doctor.probes") == ROOT / "probes" / "__init__.py"
    assert path_of("ds_doctor.reports.markdown") == ROOT / "reports" / "markdown.py"
    assert path_of("ds_doctor.knowledge") == ROOT / "doctor" / "knowledge" / "__init__.py"
    assert path_of("ds_doctor.run.no_such_module") is None
    assert path_of("ds_doctorx.run") is None


def test_the_mapping_is_setup_cfgs() -> None:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    mapped = {
        name.strip(): folder.strip()
        for line in config["options"]["package_dir"].strip().splitlines()
        for name, folder in [line.split("=")]
    }
    assert {name: mapped[name] for name in PACKAGES.values()} == {name: f for f, name in PACKAGES.items()}


@pytest.mark.parametrize("folder", READ)
def test_every_ds_doctor_import_resolves_to_a_file(folder: str) -> None:
    bad = [
        line for path in sources() if path.relative_to(ROOT).parts[0] == folder for line in unresolved(path)
    ]
    assert not bad, "\n".join(bad)


def test_a_planted_import_without_a_file_is_found() -> None:
    planted = ROOT / "tests" / "_planted_import_check.py"
    planted.write_text(
        "from ds_doctor.run.gone import thing\nimport ds_doctor.knowledge.gone\nimport ds_doctor.run\n"
    )
    try:
        found = unresolved(planted)
    finally:
        planted.unlink()
    assert len(found) == 2, found

"""The architecture, checked: imports point one way (no cycle between files, none between the packages but the
probe registry the runner loads), renderers import neither torch nor the engine, and no module grows past 400
lines. Imports are read with ast, lazy ones inside functions included."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Each source folder and the import name it installs as (setup.cfg's package_dir).
PACKAGES = {"doctor": "ds_doctor", "probes": "ds_doctor.probes", "reports": "ds_doctor.reports"}


def modules() -> dict[str, Path]:
    found = {}
    for folder, name in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            dotted = ".".join([name, *path.relative_to(ROOT / folder).with_suffix("").parts])
            found[dotted.removesuffix(".__init__")] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `module` imports (a name resolves to the longest module it names)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
    return out


def graph() -> dict[str, set[str]]:
    known = modules()
    return {module: imported(module, path, known) for module, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = _pop_component(stack, node)
            if len(component) > 1:
                found.append(sorted(component))

    for node in edges:
        if node not in index:
            visit(node)
    return found


def _pop_component(stack: list[str], root: str) -> list[str]:
    """The members above and including `root` on Tarjan's stack: one strongly connected component."""
    component = []
    while True:
        member = stack.pop()
        component.append(member)
        if member == root:
            return component


def top(module: str) -> str:
    """The source folder a module lives in: `doctor`, `probes` or `reports` (another name: its first part)."""
    parts = module.split(".")
    if parts[0] != "ds_doctor":
        return parts[0]
    return parts[1] if len(parts) > 1 and parts[1] in ("probes", "reports") else "doctor"


REGISTRY = "ds_doctor.probes"  # the runner loads the probe registry by name: the one edge allowed back


def package_edges(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Edges between the source folders, leaving out the runner's load of the probe registry (`ds_doctor.probes`)."""
    return {
        (top(a), top(b))
        for a, targets in edges.items()
        for b in targets
        if top(a) != top(b) and b != REGISTRY
    }


def test_the_cycle_check_finds_a_planted_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert package_edges(
        {"ds_doctor.x": {"ds_doctor.reports.y", REGISTRY}, "ds_doctor.probes.z": {"ds_doctor.x"}}
    ) == {("doctor", "reports"), ("probes", "doctor")}


def test_no_import_cycle_between_files() -> None:
    assert cycles(graph()) == []


def test_no_import_cycle_between_packages_but_the_probe_registry() -> None:
    edges = package_edges(graph())
    assert not {(a, b) for a, b in edges if (b, a) in edges}, edges
    # renderers read records only
    assert ("reports", "doctor") not in edges and ("reports", "probes") not in edges


def unit(module: str) -> str:
    """The unit a module belongs to for the layering check: a subpackage of doctor (`ds_doctor.run`), one of doctor's
    own modules (`ds_doctor.rundir`), or a top-level package (`probes`, `reports`)."""
    if top(module) != "doctor":
        return top(module)
    return ".".join(module.split(".")[:2])


def unit_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, targets in edges.items():
        for b in targets:
            if unit(a) != unit(b) and b != REGISTRY:
                out.setdefault(unit(a), set()).add(unit(b))
    return out


def test_the_unit_check_finds_a_planted_cycle_between_subpackages() -> None:
    planted = {
        "ds_doctor.run.launch": {"ds_doctor.forensics.capture"},
        "ds_doctor.forensics.capture": {"ds_doctor.run.rundir"},
    }
    assert cycles(unit_edges(planted)) == [["ds_doctor.forensics", "ds_doctor.run"]]


def test_no_import_cycle_between_doctors_subpackages() -> None:
    """Each subpackage does one job; imports between them point one way (the runner loads the probes by name)."""
    assert cycles(unit_edges(graph())) == []


def test_doctor_has_the_layers_it_shows() -> None:
    """`ds_doctor.plugins`, the probe author's API over the layers, is no layer of its own."""
    subpackages = sorted(
        p.parent.name for p in (ROOT / "doctor").glob("*/__init__.py") if p.parent.name != "plugins"
    )
    assert subpackages == [
        "checks",
        "cluster",
        "collect",
        "fleet",
        "forensics",
        "formats",
        "hardware",
        "knowledge",
        "ops",
        "probe",
        "releases",
        "run",
        "table",
        "usersetup",
        "watch",
    ]
    for name in subpackages:  # its job in one line: the docstring of its __init__
        doc = ast.get_docstring(ast.parse((ROOT / "doctor" / name / "__init__.py").read_text())) or ""
        assert doc and "\n" not in doc.strip(), name


def test_no_subpackage_outgrows_one_job() -> None:
    """The aim: a subpackage of doctor stays within 16 modules, or splits; past ~2,200 lines it is named in the
    warnings for a cohesion review (a line gate made line packing, and the formatter changed what a line is)."""
    for package in (p.parent for p in (ROOT / "doctor").glob("*/__init__.py")):
        files = list(package.rglob("*.py"))
        lines = sum(len(f.read_text().splitlines()) for f in files)
        assert len(files) <= 16, (package.name, len(files))
        if lines > 2200:
            warnings.warn(f"doctor/{package.name} has {lines} lines: does it still do one job?", stacklevel=1)


def test_a_module_over_400_lines_asks_for_a_cohesion_review() -> None:
    """Not a gate (a gate made line packing: two modules sat at exactly 400 through four commits): a module past 400
    lines is named in the warnings, for a reviewer to ask whether it still does one job."""
    sizes = {module: len(path.read_text().splitlines()) for module, path in modules().items()}
    for module, lines in sorted(sizes.items()):
        if lines > 400:
            warnings.warn(f"{module} has {lines} lines: does it still do one job?", UserWarning, stacklevel=1)
    assert sizes  # the modules were read


def probe_api_violations(edges: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} imports {b}"
        for a, targets in edges.items()
        if top(a) == "probes"
        for b in targets
        if top(b) == "doctor" and not b.startswith("ds_doctor.plugins")
    )


def test_the_built_in_probes_reach_ds_doctor_through_the_probe_api_alone() -> None:
    """What a built-in family needs, a third-party probe will too: ds_doctor.plugins (and its submodules) has it."""
    assert probe_api_violations(
        {"ds_doctor.probes.x": {"ds_doctor.run.launch", "ds_doctor.plugins.checks"}}
    ) == ["ds_doctor.probes.x imports ds_doctor.run.launch"]
    assert probe_api_violations(graph()) == []


def test_a_probe_is_a_top_level_module_or_a_family_package_s_probe_and_helpers_live_apart() -> None:
    import ds_doctor.probes

    families = {p.parent.name for p in (ROOT / "probes").glob("*/__init__.py")} - {"shared"}
    expected = {f"ds_doctor.probes.{p.stem}" for p in (ROOT / "probes").glob("*.py") if p.stem != "__init__"}
    expected |= {f"ds_doctor.probes.{family}.probe" for family in families}
    assert set(ds_doctor.probes.PROBE_MODULES) == expected


def reports_modules() -> Iterator[str]:
    return (m for m in sorted(modules()) if top(m) == "reports")


BLOCK_TORCH = """
import importlib, importlib.abc, sys
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        engine = name.startswith("ds_doctor.") and not name.startswith("ds_doctor.reports")
        if name.split(".")[0] in ("torch", "deepspeed", "accelerate") or engine:
            raise ImportError(f"{name} is blocked: renderers read records only")
sys.meta_path.insert(0, Blocked())
for name in sys.argv[1:]:
    importlib.import_module(name)
print("imported", len(sys.argv) - 1)
"""


def test_every_renderer_imports_with_torch_and_the_engine_blocked() -> None:
    names = list(reports_modules())
    assert "ds_doctor.reports.markdown" in names and "ds_doctor.reports.console" in names
    proc = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH, *names], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"imported {len(names)}"


def test_the_blocker_blocks() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH, "ds_doctor.run.pipeline"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode != 0 and "blocked" in proc.stderr


@pytest.mark.parametrize("module", ["ds_doctor.cli", "ds_doctor.plugins", "ds_doctor.hardware.env"])
def test_entry_points_stay_light(module: str) -> None:
    """`ds-doctor --help`, `env` and a probe module's import never pull torch in (heavy imports live in functions)."""
    code = f"import sys, {module}; print('torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr[-2000:]


def test_every_loaded_test_is_in_a_file_make_test_runs_beside_the_hog() -> None:
    """`make test` runs the `loaded` tests from the files its LOADED names (collecting only those): a test marked
    `loaded` in any other file would never run."""
    makefile = (ROOT / "Makefile").read_text()
    listed = set(re.search(r"^LOADED := (.+)$", makefile, re.MULTILINE).group(1).split())  # type: ignore[union-attr]
    marked = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests").rglob("test_*.py")
        if re.search(r"pytest\.mark\.loaded\b", path.read_text())
    }
    assert marked == listed, (marked, listed)

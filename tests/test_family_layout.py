"""The probe-family contract (docs/writing-probes.md, "A family of modules"), held over probes/: a family package has
fixed file roles (`probe.py` the spec and run, `cases.py` the variants, `routes.py` how each wrapper trains,
`subject.py`, `invariants.py`, helpers named in its docstring), every case names its wrapper by `Wrapper`, measures
and scenarios are declared only beside a spec, and every requirement comes from `ds_doctor.plugins.requirements`.
The checks read files (ast) and import the families; each is tried on a planted violation too."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

from ds_doctor.plugins import RankOptions, Wrapper
from ds_doctor.probe import registry

ROOT = Path(__file__).resolve().parents[1]
PROBES = ROOT / "probes"
#: the roles a family's files have; the first three every family has
REQUIRED = ("__init__", "probe", "cases")
ROLES = (*REQUIRED, "routes", "subject", "invariants")
#: what a family's `cases.py` may import at its top: its cases are read by `ds-doctor list`, which imports no torch
CASES_MAY_IMPORT = ("__future__", "ds_doctor.plugins")
REGISTERS = ("register_measure", "register_scenario")


def families(root: Path = PROBES) -> list[Path]:
    """The family packages under `root` (`probes/shared` holds helpers, not a family)."""
    return sorted(p.parent for p in root.glob("*/__init__.py") if p.parent.name != "shared")


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _top_level_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top: functions, classes, assignments."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _top_level_imports(tree: ast.Module) -> list[str]:
    out = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.append(node.module or "")
    return out


def _light(module: str) -> bool:
    top = module.split(".")[0]
    return top in sys.stdlib_module_names or any(
        module == allowed or module.startswith(allowed + ".") for allowed in CASES_MAY_IMPORT
    )


def file_violations(family: Path) -> list[str]:
    """What a family's files break of the contract, read without importing them."""
    found = [f"{family.name}: no {role}.py" for role in REQUIRED if not (family / f"{role}.py").is_file()]
    if found:
        return found
    modules = sorted(p.stem for p in family.glob("*.py") if p.stem != "__init__")
    doc = ast.get_docstring(_tree(family / "__init__.py")) or ""
    found += [
        f"{family.name}: __init__'s docstring does not name `{m}`" for m in modules if f"`{m}`" not in doc
    ]
    for module in modules:
        names = _top_level_names(_tree(family / f"{module}.py"))
        if "SPEC" in names and module != "probe":
            found.append(f"{family.name}.{module} declares SPEC: only probe.py does")
        if "variants" in names and module != "cases":
            found.append(f"{family.name}.{module} defines variants: only cases.py does")
    if "variants" not in _top_level_names(_tree(family / "cases.py")):
        found.append(f"{family.name}.cases defines no variants")
    heavy = [m for m in _top_level_imports(_tree(family / "cases.py")) if not _light(m)]
    found += [f"{family.name}.cases imports {m} at its top: the cases import nothing heavy" for m in heavy]
    return found


def import_violations(package: str) -> list[str]:
    """What an importable family breaks of the contract: its probe's `variants` is its cases' own, and each case
    that names a wrapper names a `Wrapper`."""
    probe = importlib.import_module(f"{package}.probe")
    cases = importlib.import_module(f"{package}.cases")
    found = []
    if getattr(probe, "variants", None) is not getattr(cases, "variants", None):
        found.append(f"{package}.probe's variants is not {package}.cases.variants")
    for variant in registry.variants_of(probe, RankOptions()):
        wrapper = getattr(variant.params, "wrapper", None)
        if hasattr(variant.params, "wrapper") and not isinstance(wrapper, Wrapper):
            found.append(f"{package}: case {variant.name} names its wrapper as {wrapper!r}, not a Wrapper")
    return found


def _calls(tree: ast.AST) -> list[tuple[str, ast.Call]]:
    return [
        (node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", ""), node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    ]


def _is_probe_module(path: Path, root: Path) -> bool:
    """A top-level probe module, or a family's probe.py."""
    relative = path.relative_to(root)
    top_level = len(relative.parts) == 1 and path.stem != "__init__"
    return top_level or (path.name == "probe.py" and relative.parts[0] != "shared")


def source_violations(root: Path = PROBES) -> list[str]:
    """Across every probe file: requirements built in place, measures or scenarios registered away from a spec, and a
    route's wrapper compared with a string."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree, where = _tree(path), path.relative_to(root)
        for name, call in _calls(tree):
            if name == "Requirement":
                found.append(
                    f"{where}:{call.lineno}: builds a Requirement; name one of ds_doctor.plugins.requirements"
                )
            if name in REGISTERS and not _is_probe_module(path, root):
                found.append(f"{where}:{call.lineno}: {name} outside a probe module (beside its SPEC)")
        found += [
            f"{where}:{line}: a wrapper compared with a string" for line in _string_wrapper_compares(tree)
        ]
    return found


def _string_wrapper_compares(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = any(isinstance(s, ast.Attribute) and s.attr in ("wrapper", "resume") for s in sides)
        literal = any(isinstance(s, ast.Constant) and isinstance(s.value, str) for s in sides)
        if named and literal:
            lines.append(node.lineno)
    return lines


def test_the_built_in_families_keep_the_contract() -> None:
    found = families()
    assert {f.name for f in found} >= {"equivalence", "coverage"}
    assert [v for family in found for v in file_violations(family)] == []


@pytest.mark.parametrize("family", [f.name for f in families()])
def test_a_built_in_family_s_probe_and_cases_agree(family: str) -> None:
    assert import_violations(f"ds_doctor.probes.{family}") == []


def test_no_probe_builds_a_requirement_registers_away_from_its_spec_or_spells_a_wrapper() -> None:
    assert source_violations() == []


def test_every_built_in_case_names_its_wrapper_by_the_enum() -> None:
    named = [
        v.params.wrapper
        for module in registry.load_modules().values()
        for v in registry.variants_of(module, RankOptions())
        if hasattr(v.params, "wrapper")
    ]
    assert named and all(isinstance(w, Wrapper) for w in named)
    assert {w for w in named} >= {
        Wrapper.DDP,
        Wrapper.FSDP2,
        Wrapper.DEEPSPEED,
        Wrapper.TRAINER,
        Wrapper.COMPOSER,
    }


def _plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_checks_find_planted_violations(tmp_path: Path) -> None:
    bad = _plant(
        tmp_path,
        {
            "fam/__init__.py": '"""A family; `probe` is the probe, `cases` the cases."""\n',
            "fam/probe.py": "SPEC = None\n\ndef variants():\n    return []\n",
            "fam/cases.py": "import torch\n\nSPEC = None\n",
            "fam/helper.py": "from x import Requirement, register_measure\nM = register_measure(1)\n",
            "fam/routes.py": "def f(route):\n    return route.wrapper == 'ddp'\n",
            "half/__init__.py": '"""no probe here"""\n',
        },
    )
    assert [f.name for f in families(bad)] == ["fam", "half"]
    assert file_violations(bad / "half") == ["half: no probe.py", "half: no cases.py"]
    assert file_violations(bad / "fam") == [
        "fam: __init__'s docstring does not name `helper`",
        "fam: __init__'s docstring does not name `routes`",
        "fam.cases declares SPEC: only probe.py does",
        "fam.probe defines variants: only cases.py does",
        "fam.cases defines no variants",
        "fam.cases imports torch at its top: the cases import nothing heavy",
    ]
    (bad / "fam" / "helper.py").write_text("R = Requirement('x', 'x')\nM = register_measure(1)\n")
    assert source_violations(bad) == [
        "fam/helper.py:1: builds a Requirement; name one of ds_doctor.plugins.requirements",
        "fam/helper.py:2: register_measure outside a probe module (beside its SPEC)",
        "fam/routes.py:2: a wrapper compared with a string",
    ]

"""Issue 49, checked: renderers know no probe (no probe's name compared with a case's `.probe`, no note read by a
probe's key: a renderer asks for a view by its type, `ds_doctor.reports.views`), and an extra output format is its
own module (`ds_doctor.formats`): every format has an option, a check and a writer, the CLI names none of them, and a
format registered from outside works end to end through `ds-doctor report --<its option>` with no other file
touched. Sources are read with ast."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from ds_doctor.cli import main
from ds_doctor.formats import (
    FormatError,
    OutputFormat,
    Target,
    WriteContext,
    built_in,
    formats,
    register,
    registered,
    text_file,
)
from ds_doctor.reports.model import CaseResult, Outcome, Report
from ds_doctor.reports.views import GpuCheck, NodeRecordCheck

ROOT = Path(__file__).resolve().parents[1]


def probe_names() -> set[str]:
    """The built-in probes' names."""
    from ds_doctor.probe import registry

    return {spec.name for spec in registry.specs()}


#: ds-doctor's own check families: cases like probes' (`node_records` is also the hardware section's key)
FAMILIES = {GpuCheck.FAMILY, NodeRecordCheck.FAMILY}


def renderers() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((ROOT / "reports").glob("*.py")):
        yield str(path.relative_to(ROOT)), ast.parse(path.read_text())


def _strings(node: ast.AST) -> list[str]:
    """The string literals of a comparison's side: one, or those of a tuple, list or set of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for element in node.elts for s in _strings(element)]
    return []


def _is_attribute(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == name


def probe_comparisons(tree: ast.Module) -> list[str]:
    """String literals compared with a `.probe` (`r.probe == "comm"`, `result.probe in ("a", "b")`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_attribute(side, "probe") for side in sides):
                found += [s for side in sides for s in _strings(side)]
    return found


def note_keys(tree: ast.Module) -> list[str]:
    """String literals a `.notes` is read or tested with: `x.notes["k"]`, `x.notes.get("k")`, `"k" in x.notes`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_attribute(node.value, "notes"):
            found += _strings(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if _is_attribute(node.func.value, "notes") and node.args:
                found += _strings(node.args[0])
        elif isinstance(node, ast.Compare) and any(_is_attribute(c, "notes") for c in node.comparators):
            found += _strings(node.left)
    return found


def literals(tree: ast.Module) -> Iterator[str]:
    """Every string literal but docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


def test_the_checks_find_what_they_look_for() -> None:
    planted = ast.parse(
        'if r.probe == "comm" or "x" in r.notes or r.probe in ("a", "b"): y = r.notes["equivalence"]\n'
        'z = r.notes.get("user_config"); ok = r.notes.get(StepTable.NOTE)\n'
    )
    assert sorted(probe_comparisons(planted)) == ["a", "b", "comm"]
    assert sorted(note_keys(planted)) == ["equivalence", "user_config", "x"]
    documented = ast.parse('def f():\n    """comm"""\n    return "comm["')
    assert list(literals(documented)) == ["comm["]


def test_no_renderer_compares_a_case_with_a_probe_s_name() -> None:
    found = [(module, name) for module, tree in renderers() for name in probe_comparisons(tree)]
    assert not found, sorted(found)


def test_no_renderer_reads_a_note_by_its_key() -> None:
    """A note is read through the view that travels in it (`view_of(result, StepTable)`), never by a literal key."""
    found = [(module, key) for module, tree in renderers() for key in note_keys(tree)]
    assert not found, found


def test_no_renderer_spells_a_probe_s_name_or_its_cases() -> None:
    """No `"comm"`, no `"comm["` prefix to strip: a chart's title and legend come from the case's own fields. The
    views module declares where each view travels, the engine's check families by name (`GpuCheck.FAMILY`)."""
    names = probe_names()
    found = [
        (module, text)
        for module, tree in renderers()
        if module != "reports/views.py"
        for text in literals(tree)
        if text in names or any(text.startswith(f"{name}[") for name in names | FAMILIES)
    ]
    assert not found, sorted(found)


# ---- the formats --------------------------------------------------------------------------------------------------


def test_every_format_has_an_option_a_check_and_a_writer() -> None:
    assert [f.name for f in built_in()] == ["junit", "prometheus", "table"]
    options = [option for f in formats() for option in f.options]
    assert len(options) == len(set(options))
    for output in formats():
        assert output.options and all(option.startswith("--") for option in output.options), output.name
        assert output.help.startswith("Also write"), output.name
        assert output.target in (Target.FILE, Target.FOLDER) and callable(output.requires), output.name
        assert callable(output.write), output.name


def test_the_cli_names_no_format() -> None:
    """Options, checks and writing come from the registry: `cli.py` and `cli_outputs.py` spell no format's option."""
    spelled = {option for f in formats() for option in f.options}
    for module in ("doctor/cli.py", "doctor/cli_outputs.py"):
        tree = ast.parse((ROOT / module).read_text())
        assert not spelled & set(literals(tree)), (module, spelled & set(literals(tree)))


def test_a_format_s_name_and_options_are_its_own() -> None:
    junit = next(f for f in formats() if f.name == "junit")
    with pytest.raises(ValueError, match="clashes with format 'junit'"):
        register(OutputFormat("xml", ("--junitxml",), "Also write XML.", Target.FILE, junit.write))
    with pytest.raises(ValueError, match="long options"):
        OutputFormat("bad", ("-b",), "Also write.", Target.FILE, junit.write)


def _toy(report: Report, context: WriteContext) -> str:
    return f"{len(report.results)} case(s), tolerance {context.tolerance_pct:g}\n"


TOY = OutputFormat(
    name="toy",
    options=("--toy", "--toy-count"),
    help="Also write how many cases ran.",
    target=Target.FILE,
    write=text_file(_toy),
    label="Toy count",
)


def _needs_a_package() -> None:
    raise FormatError("writing the toy folder needs toylib: pip install toylib")


TOY_FOLDER = OutputFormat(
    name="toy_folder",
    options=("--toy-folder",),
    help="Also write a folder of toys.",
    target=Target.FOLDER,
    write=text_file(_toy),
    requires=_needs_a_package,
)


@pytest.fixture
def report_json(tmp_path: Path) -> Path:
    from ds_doctor.run.build import build_report, utc_now

    now = utc_now()
    case = CaseResult("p", "p[a-ws1]", "smoke", 1, 1, "cpu", Outcome.PASS, 0.1)
    built = build_report(
        started=now,
        finished=now,
        level=1,
        argv=(),
        env={"python": "3.11", "packages": {}},
        hardware={"host": "h", "cpus": 1, "memory_bytes": 1, "gpus": []},
        results=[case],
        run_dir=None,
    )
    path = tmp_path / "report.json"
    path.write_text(built.to_json())
    return path


def test_a_format_registered_from_outside_works_end_to_end(
    report_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's "a new output format can be added by touching only its own files": the toy is offered by
    `report` and `run`, checked before anything runs, written, listed; cli.py never heard of it."""
    toy, out = tmp_path / "toy.txt", tmp_path / "out"
    with registered(TOY):
        assert main(["report", str(report_json), "--out", str(out), "--toy", str(toy)]) == 0
        assert toy.read_text() == "1 case(s), tolerance 10\n"
        assert f"Toy count: {toy}" in capsys.readouterr().out
        assert main(["report", str(report_json), "--out", str(out), "--toy-count", str(toy)]) == 0
        # its check, before anything is written: one line, exit 2, against its own option
        assert main(["report", str(report_json), "--out", str(out), "--toy", str(tmp_path)]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [
            f"ds-doctor: error: Invalid value for --toy: {tmp_path} is a directory"
        ]
        assert main(["report", str(report_json), "--toy", str(report_json)]) == 2
        assert "is also PATH (an input)" in capsys.readouterr().err
        assert main(["run", "--junit", str(toy), "--toy", str(toy)]) == 2  # `run` offers it too
        assert "is also --junit (another output)" in capsys.readouterr().err
        assert main(["report", "--help"]) == 0
        help_text = capsys.readouterr().out
        assert help_text.index("--table") < help_text.index("--toy, --toy-count") < help_text.index("--help")
    assert main(["report", str(report_json), "--toy", str(toy)]) == 2  # gone with its registration
    assert "No such option '--toy'" in capsys.readouterr().err
    assert "toy" not in (ROOT / "doctor" / "cli.py").read_text().lower()


def test_a_format_s_requirement_is_checked_before_anything_runs(
    report_json: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    with registered(TOY_FOLDER):
        assert main(["report", str(report_json), "--out", str(out), "--toy-folder", str(tmp_path / "t")]) == 2
    assert capsys.readouterr().err.strip() == (
        "ds-doctor: error: Invalid value for --toy-folder: writing the toy folder needs toylib: pip install toylib"
    )
    assert not out.exists() and not (tmp_path / "t").exists()

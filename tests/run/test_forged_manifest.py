"""A run directory's manifest (`run.json`) forged, and an output folder whose report names another writer took:
`ds-doctor report` ends in a rendered report or in one line naming the manifest or the folder (exit 2), never exit 3
or a traceback.

The manifest's parts that the rebuild computes with before the rebuilt report meets its schema (the `-k` it compiles
again, the environment and hardware the node's own checks read, each planned case's name and known issues) are each
forged with wrong values; then a small fixed-seed sample of every field forged with a few values. Each runs in this
process through `ds_doctor.cli.main`, whose mapping of exceptions to exit codes is what is under test."""

from __future__ import annotations

import copy
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from ds_doctor.cli import main
from ds_doctor.run import build
from ds_doctor.run.build import report_basename
from ds_doctor.rundir import RunDir
from tests.reports.samples import a_failed_case, a_report
from tests.run.test_recover import a_run_dir

#: (where in the manifest, the forged value, what the one line names)
FORGED: dict[str, tuple[tuple[Any, ...], Any, str]] = {
    "keyword an open parenthesis": (("keyword",), "(", "keyword"),
    "keyword a bare operator": (("keyword",), "and", "keyword"),
    "keyword nested past the bound": (("keyword",), "not " * 65 + "x", "keyword"),
    "keyword a number": (("keyword",), 5, "keyword"),
    "keyword a list": (("keyword",), ["comm"], "keyword"),
    "packages null": (("env", "packages"), None, "at env/packages"),
    "packages a string": (("env", "packages"), "x", "at env/packages"),
    "variables a list of pairs": (("env", "variables"), [["A", "1"]], "at env/variables"),
    "version skew a string": (("env", "version_skew"), "x", "at env/version_skew"),
    "version skew of lists": (("env", "version_skew"), [[1]], "at env/version_skew/0"),
    "gpus a string": (("hardware", "gpus"), "x", "at hardware/gpus"),
    "gpus of lists": (("hardware", "gpus"), [[1]], "at hardware/gpus/0"),
    "gpus an integer beyond any float": (("hardware", "gpus"), 10**400, "at hardware/gpus"),
    "case a list": (("planned", 0, "case"), ["comm"], "case"),
    "case an object": (("planned", 0, "case"), {"a": 1}, "case"),
    "known issues a string": (("planned", 0, "known_issues"), "x", "known_issues"),
    "known issues an object": (("planned", 0, "known_issues"), {"a": {"b": 1}}, "known_issues"),
    "known issues of lists": (("planned", 0, "known_issues"), [[1]], "known issue [1]"),
    "known issue this ds-doctor does not know": (
        ("planned", 0, "known_issues"),
        ["no_such_issue"],
        "no_such_issue",
    ),
    "a skip's case a list": (("skips", 0, "case"), [1], "case"),
    "world size true": (("planned", 0, "world_size"), True, "world_size"),
}


def forge(run_dir: RunDir, where: tuple[Any, ...], value: Any) -> None:
    """`run_dir`'s manifest with `value` at `where`."""
    data = json.loads(run_dir.manifest.read_text())
    holder = data
    for step in where[:-1]:
        holder = holder[step]
    holder[where[-1]] = copy.deepcopy(value)
    run_dir.manifest.write_text(json.dumps(data))


def report_of(capsys: pytest.CaptureFixture[str], path: Path, out: Path) -> tuple[int, list[str]]:
    """`ds-doctor report PATH --out OUT`: its exit code and what it said on stderr, its warnings aside."""
    out.mkdir(exist_ok=True)
    capsys.readouterr()
    code = main(["report", str(path), "--out", str(out)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    return code, [line for line in err.strip().splitlines() if not line.startswith("ds-doctor: warning:")]


@pytest.mark.parametrize(("where", "value", "named"), FORGED.values(), ids=list(FORGED))
def test_a_forged_manifest_field_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: tuple[Any, ...], value: Any, named: str
) -> None:
    run_dir = a_run_dir(tmp_path)
    forge(run_dir, where, value)
    code, said = report_of(capsys, run_dir.path, tmp_path / "out")
    assert code == 2 and len(said) == 1, (code, said)
    assert said[0].startswith("ds-doctor: error:") and str(run_dir.manifest) in said[0], said
    assert named in said[0], said


def test_a_manifest_of_the_right_types_is_still_rebuilt(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The checks refuse only wrong types: a known issue this ds-doctor knows, a `-k` that compiles and a skip's
    reason under its older key are read as before."""
    run_dir = a_run_dir(tmp_path)
    forge(run_dir, ("planned", 0, "known_issues"), ["ds_frozen_param_not_in_param_names"])
    forge(run_dir, ("keyword",), "comm and not nothing")
    data = json.loads(run_dir.manifest.read_text())
    data["skips"][0]["reason"] = data["skips"][0].pop("skip_reason")
    run_dir.manifest.write_text(json.dumps(data))
    code, said = report_of(capsys, run_dir.path, tmp_path / "out")
    assert code in (0, 1) and said == [], (code, said)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into `value`, the manifest's own and those of its sections, its planned cases and its skips."""
    found = [path] if path else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found += _paths(item, (*path, key))
    return found


#: The values a sample puts at a path: nothing, a flag, a count past any float, a string, a list, an object
VALUES = (None, True, 10**400, "x", [[1]], {"a": {"b": 1}})


def test_a_sample_of_forged_manifests_ends_in_a_report_or_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A fixed sample (seed 47) of every field forged with one of `VALUES`: a rendered report or one line."""
    (tmp_path / "template").mkdir()
    template = a_run_dir(tmp_path / "template")
    paths = _paths(json.loads(template.manifest.read_text()))
    sample = random.Random(47).sample([(p, v) for p in paths for v in VALUES], 40)
    for index, (where, value) in enumerate(sample):
        (tmp_path / str(index)).mkdir()
        run_dir = a_run_dir(tmp_path / str(index))
        forge(run_dir, where, value)
        code, said = report_of(capsys, run_dir.path, tmp_path / str(index) / "out")
        assert code in (0, 1, 2), (where, value, code, said)
        if code == 2:
            assert len(said) == 1 and str(run_dir.path) in said[0], (where, value, said)


def _a_report_file(tmp_path: Path) -> tuple[Path, str]:
    """A report file, and the name its reports take in `report FILE`'s output folder."""
    report = a_report([a_failed_case()])
    path = tmp_path / "in.json"
    path.write_text(report.to_json())
    return path, report_basename(report) + "-report"


def test_report_names_taken_beforehand_give_way_to_a_random_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A writer of the output folder who took the report's name and every name its process would try next (they
    follow from the report and a pid) does not stop the report: it takes a name nobody could guess."""
    path, base = _a_report_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    taken = [out / f"{base}.json", *(out / f"{base}-{os.getpid()}-{n}.json" for n in range(1, 100))]
    for name in taken:
        name.write_text("taken")
    code, said = report_of(capsys, path, out)
    assert code == 1 and said == [], (code, said)
    written = sorted(set(out.glob(f"{base}-*.json")) - set(taken))
    assert len(written) == 1 and json.loads(written[0].read_text())["tool"]["name"] == "ds-doctor"
    assert written[0].with_suffix(".md").is_file() and written[0].with_suffix(".html").is_file()
    assert all(name.read_text() == "taken" for name in taken)


def test_no_free_report_name_is_one_line_naming_the_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, base = _a_report_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    for name in [f"{base}.json", *(f"{base}-{os.getpid()}-{n}.json" for n in range(1, 100))]:
        (out / name).write_text("taken")
    monkeypatch.setattr(build, "RANDOM_NAMES", 0)  # as if every random name were taken too
    code, said = report_of(capsys, path, out)
    assert code == 2 and len(said) == 1 and said[0].startswith("ds-doctor: error:"), (code, said)
    assert str(out) in said[0] and "no free name" in said[0], said


def test_a_folder_planted_at_the_markdown_name_gives_way_to_the_next_name(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The JSON is made exclusively, the Markdown and HTML beside it by rename: a folder at the Markdown's name makes
    the whole name taken (its JSON taken back), and the report goes to the next one."""
    path, base = _a_report_file(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{base}.md").mkdir()
    code, said = report_of(capsys, path, out)
    assert code == 1 and said == [], (code, said)
    assert not (out / f"{base}.json").exists() and (out / f"{base}.md").is_dir()
    written = out / f"{base}-{os.getpid()}-1"
    assert all(written.with_suffix(suffix).is_file() for suffix in (".json", ".md", ".html"))

"""The CLI's commands, help, and its one-line usage errors (exit code 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from doctor.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["list", "--help"], ["env", "--help"], ["triage", "--help"],
                                  ["--version"]])
def test_help_and_version_exit_zero(capsys, args) -> None:
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and out


def test_list_shows_cases(capsys) -> None:
    code, out, _ = run_cli(capsys, "list", "-k", "z3-opt+param")
    assert code == 0 and "zero_offload[z3-opt+param-bf16-ws2]" in out and "z2-" not in out


def test_env_json_has_no_torch_import() -> None:
    code = ("import sys, json, io, contextlib; from doctor.cli import main; buf = io.StringIO();\n"
            "with contextlib.redirect_stdout(buf): rc = main(['env', '--json'])\n"
            "data = json.loads(buf.getvalue()); assert rc == 0 and 'packages' in data['env'], data;\n"
            "assert 'torch' not in sys.modules and 'deepspeed' not in sys.modules, 'heavy import'")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["run", "--level", "7"], "--level"),
        (["run", "--level", "abc"], "--level"),
        (["run", "-k", "no_such_case_anywhere"], "zero_offload"),
        (["run", "-k", "(z3"], "-k"),
        (["run", "-k", "z2-opt"], "--level 3"),
        (["run", "--nproc", "0"], "--nproc"),
        (["run", "--nproc", "-1"], "--nproc"),
        (["run", "--timeout", "abc"], "--timeout"),
        (["run", "--timeout", "0"], "--timeout"),
        (["run", "--bogus"], "--bogus"),
        (["frobnicate"], "frobnicate"),
        (["list", "-k", "nothing_matches_this"], "zero_offload"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(capsys, tmp_path, args, needle) -> None:
    out_args = ["--out", str(tmp_path)] if args[0] == "run" and "--bogus" not in args else []
    code, _, err = run_cli(capsys, *args, *out_args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("ds-doctor: error:") and needle in err
    assert "Traceback" not in err and not list(tmp_path.glob("*.json"))


def test_out_must_be_a_writable_directory(capsys, tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, _, err = run_cli(capsys, "run", "--level", "1", "--out", str(a_file))
    assert code == 2 and "not a directory" in err and len(err.strip().splitlines()) == 1


def test_level_1_writes_an_environment_only_report(capsys, tmp_path: Path) -> None:
    import json

    from reports.model import validate

    code, out, _ = run_cli(capsys, "run", "--level", "1", "--out", str(tmp_path))
    assert code == 0
    reports = list(tmp_path.glob("ds-doctor-*.json"))
    assert len(reports) == 1 and str(reports[0]) in out.replace("\n", "")
    data = json.loads(reports[0].read_text())
    validate(data)
    assert data["results"] == [] and data["hardware"]["cpus"] and data["env"]["packages"]["ds-doctor"]
    assert (tmp_path / reports[0].name.replace(".json", ".md")).read_text().startswith("# ds-doctor report")


def test_a_missing_transformers_skips_the_accelerate_family_with_the_install_line(tmp_path: Path) -> None:
    """transformers hidden the way Python hides a module (sys.modules entry None): find_spec says missing."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['transformers'] = None\n")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{shim}:{root}"}
    proc = subprocess.run([sys.executable, "-m", "doctor.cli", "run", "--level", "3", "-k", "accelerate_deepspeed",
                           "--out", str(tmp_path / "out"), "--json"], capture_output=True, text=True, env=env,
                          cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(proc.stdout)["results"]
    assert len(results) == 24 and {r["outcome"] for r in results} == {"skip"}
    assert {r["reason"] for r in results} == {"missing optional dependency: pip install transformers"}

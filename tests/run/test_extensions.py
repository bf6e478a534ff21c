"""The ranks' own extensions folder (another environment's DeepSpeed cannot rebuild an op under them) and the line
a first run says while it builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ds_doctor.probe.rankoptions import RankOptions
from ds_doctor.run.extensions import build_key, first_build_line, private_extensions_dir
from ds_doctor.run.launch import rank_environment


def test_the_folder_is_the_doctors_own_keyed_by_interpreter_torch_and_deepspeed(tmp_path: Path) -> None:
    folder = private_extensions_dir({"XDG_CACHE_HOME": str(tmp_path)})
    assert folder == str(tmp_path / "ds-doctor" / "torch_extensions" / build_key())
    key = build_key()
    assert key.startswith(f"py{sys.version_info.major}{sys.version_info.minor}-torch") and "-ds0." in key
    # the user's own choice is theirs
    assert private_extensions_dir({"TORCH_EXTENSIONS_DIR": "/scratch/ext"}) is None
    # and the ranks build where the options say
    env = rank_environment(RankOptions(extensions_dir=folder), None, False, None)
    assert env["TORCH_EXTENSIONS_DIR"] == folder


def test_another_interpreter_gets_another_folder(tmp_path: Path) -> None:
    """A second environment (here: the same files under another interpreter path, as a second venv is) never shares
    the folder, so its DeepSpeed cannot rebuild an op this one loads."""
    other = tmp_path / "venv" / "bin"
    other.mkdir(parents=True)
    (other / "python").write_bytes(b"")  # a distinct interpreter path
    code = "from ds_doctor.run.extensions import build_key; print(build_key())"
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert here.strip() == build_key()
    patched = f"import sys; sys.executable = {str(other / 'python')!r}; " + code
    elsewhere = subprocess.run(
        [sys.executable, "-c", patched], capture_output=True, text=True, check=True
    ).stdout
    assert elsewhere.strip() != build_key() and elsewhere.split("-")[:3] == build_key().split("-")[:3]


def test_a_first_run_says_it_builds_and_a_later_one_does_not(tmp_path: Path) -> None:
    line = first_build_line(str(tmp_path))
    assert line is not None and str(tmp_path) in line and "once" in line and "cpu_adam" in line
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "cpu_adam.so").write_bytes(b"\x7fELF")
    assert first_build_line(str(tmp_path)) is None
    assert first_build_line(None) is None


def test_a_cold_run_off_a_terminal_says_where_it_builds(tmp_path: Path) -> None:
    """A real run with an empty cache folder: the plain line is printed before the first case (the build itself
    is the launch's; a case that needs no op builds none, so this one stays fast)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("TORCH_EXTENSIONS_DIR", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ds_doctor.cli",
            "run",
            "-k",
            "comm and all_reduce-ws1",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.splitlines() + proc.stdout.splitlines()
    (said,) = [line for line in lines if "are not built in" in line]
    assert str(tmp_path / "cache" / "ds-doctor" / "torch_extensions") in said
    options = json.loads(next(tmp_path.glob("run-*/ws1-*/options.json")).read_text())
    assert options["extensions_dir"].startswith(str(tmp_path / "cache" / "ds-doctor" / "torch_extensions"))

"""`ds-doctor bisect --find-links DIR` refuses a DIR it cannot take releases from as the command line is read: one
line on stderr, exit 2, nothing created; a missing folder spelt `./wheels` or `wheels/` ended in exit 3."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ds_doctor.cli import main


def bisect(capsys: pytest.CaptureFixture[str], out: Path, find_links: str) -> tuple[int, str, str]:
    """Run the real CLI's `bisect` with a selection that is valid, so only --find-links can refuse it."""
    argv = ["bisect", "torch", "--good", "2.0.0", "--bad", "2.1.0", "-k", "consistency", "--level", "1"]
    code = main([*argv, "--out", str(out), "--find-links", find_links])
    stdout, stderr = capsys.readouterr()
    return code, stdout, stderr


def assert_refused(code: int, stdout: str, stderr: str, out: Path) -> None:
    assert code == 2, stderr
    assert stdout == "" and len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("ds-doctor: error:") and "--find-links" in stderr
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize("spelt", ["missing", "./missing", "missing/", "{tmp}/missing/", "{tmp}/missing"])
def test_a_missing_find_links_folder_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, spelt: str
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    code, stdout, stderr = bisect(capsys, out, spelt.format(tmp=tmp_path))
    assert_refused(code, stdout, stderr, out)
    assert "does not exist" in stderr


def test_a_file_as_find_links_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    wheel = tmp_path / "torch-2.0.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    out = tmp_path / "out"
    assert_refused(*bisect(capsys, out, str(wheel)), out)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root reads any folder")
def test_an_unreadable_find_links_folder_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir(mode=0o000)
    out = tmp_path / "out"
    try:
        code, stdout, stderr = bisect(capsys, out, f"{wheels}/")
    finally:
        wheels.chmod(0o700)
    assert_refused(code, stdout, stderr, out)
    assert "not readable" in stderr

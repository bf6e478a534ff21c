"""`triage --json` printed the notes about its input as they came: a zip whose member is named with a token and
terminal escapes put the token, in clear, in the JSON (the plain and Markdown outputs already masked it). The notes,
and a dump folder's problems (a file's name), are now shown as the CLI echoes any value: secrets masked, escapes
shown, never sent."""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from pathlib import Path

import pytest

from ds_doctor.cli import main
from tests.forensics.test_flight import dump

TOKEN = "hf_Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr"
HOSTILE = f"\x1b]0;PWNED\x07\x1b[2J\u202e{TOKEN} @org/team"
TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 3\nRuntimeError: NCCL error\n'


def shown_safely(text: str) -> None:
    assert TOKEN not in text, text
    assert not any(char in text for char in "\x1b\x07\u202e"), text


def test_the_json_notes_about_a_zip_member_are_scrubbed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr(f"{HOSTILE}.log", TRACEBACK)
    assert main(["triage", str(archive), "--json"]) in (0, 1)
    out, err = capsys.readouterr()
    notes = json.loads(out)["notes"]
    assert any("the largest of 1 file(s) in the zip archive" in note for note in notes), notes
    for note in notes:
        shown_safely(note)  # was the token and the raw escapes, once the JSON was read back
    shown_safely(err)


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
def test_a_dump_folders_problems_name_its_files_safely(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, as_json: bool
) -> None:
    folder = tmp_path / "dumps"
    folder.mkdir()
    (folder / "rank_0").write_bytes(pickle.dumps(dump()))
    name = HOSTILE.replace("/", "-") + "_1"  # a file's name: no slash
    os.symlink(folder / "rank_0", folder / name)  # a link is skipped, and said, by its name
    assert main(["triage", str(folder), *(["--json"] if as_json else [])]) in (0, 1)
    out = capsys.readouterr().out
    problems = json.loads(out)["flight_recorder"]["problems"] if as_json else [out]
    assert any("skipped: a symlink (not followed)" in problem for problem in problems), problems
    for problem in problems:
        shown_safely(problem)

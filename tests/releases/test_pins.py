"""`run --with ... --ignore-pins`: a release that pins this stack out, installed over it anyway, its ignored pins
said; built from real wheels pip builds here, with no index."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from ds_doctor.releases.overlay import MARKER, parse_releases
from ds_doctor.releases.pins import build_ignoring_pins
from ds_doctor.reports.model import Report
from ds_doctor.reports.sides import ignored_pins
from tests.releases.test_overlay import make_wheel
from tests.reports.samples import a_report, every_outcome

TORCH = importlib.metadata.version("torch")


def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    make_wheel(
        folder,
        "pinned_demo",
        "import missing_demo\n",
        requires=("torch<2.0", "packaging>=1", "missing_demo>=1"),
    )
    make_wheel(folder, "missing_demo", "")
    return folder


def test_pins_are_ignored_and_said_what_is_missing_is_resolved(tmp_path: Path, monkeypatch, capsys) -> None:
    from ds_doctor.cli import main

    found = wheels(tmp_path)
    monkeypatch.setenv("DS_DOCTOR_STACKS", str(tmp_path / "stacks"))
    monkeypatch.chdir(tmp_path)
    # resolved as usual, the pin refuses it
    code = main(
        [
            "run",
            "-k",
            "comm",
            "--out",
            str(tmp_path / "out"),
            "--with",
            "pinned_demo==1.0",
            "--find-links",
            str(found),
        ]
    )
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and "pip cannot install it" in last and "torch<2.0" in last, last
    said: list[str] = []
    overlay = build_ignoring_pins(parse_releases(["pinned_demo==1.0"]), found, said.append)
    assert overlay.packages == {"pinned-demo": "1.0", "missing-demo": "1.0"}  # what the stack lacks, resolved
    # packaging is met
    assert overlay.ignored_pins == (f"pinned-demo 1.0 requires torch<2.0; this stack has {TORCH}",)
    assert "its pins ignored" in said[0] and (overlay.path / "missing_demo").is_dir()
    again: list[str] = []
    assert (
        build_ignoring_pins(parse_releases(["pinned_demo==1.0"]), found, again.append) == overlay
        and not again
    )
    assert (overlay.path / MARKER).is_file()
    report = Report.from_dict(
        {
            **a_report(every_outcome()).to_dict(),
            "stacks": [{"name": "installed", "packages": {}}, overlay.to_dict()],
        }
    )
    assert ignored_pins(report) == [
        f"pinned-demo==1.0 ignores a pin: pinned-demo 1.0 requires torch<2.0; this stack has {TORCH}"
    ]


def test_ignore_pins_is_for_with(tmp_path: Path, monkeypatch, capsys) -> None:
    from ds_doctor.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", "-k", "comm", "--out", str(tmp_path / "out"), "--ignore-pins"]) == 2
    assert "--ignore-pins is for --with" in capsys.readouterr().err and not (tmp_path / "out").exists()

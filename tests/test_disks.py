"""Files ds-doctor creates, against a hostile folder and a failing disk: a link planted at the name of its temp file
is never written through, and a real full filesystem (a 64 KiB tmpfs mounted for the test, as root) is one line
naming the path, exit 2, with no report left without its Markdown."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ds_doctor import files
from ds_doctor.files import DISK_ERRNOS, CannotWrite, disk_failure, write_atomic
from ds_doctor.run.build import write_reports, write_reports_of_run
from tests.reports.samples import a_report, every_outcome
from tests.test_cli import run_cli

PAGE = 4096


def test_a_link_planted_at_the_temp_files_name_is_never_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temp name was `.NAME.PID.tmp` (host, time and pid predictable): a link there had its target overwritten.
    Now the name is random and created O_EXCL|O_NOFOLLOW; even a link at the very name it draws is stepped over."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    target = tmp_path / "report.md"
    draws = iter(["planted", "fresh"])
    monkeypatch.setattr(files.secrets, "token_hex", lambda _n: next(draws))
    (tmp_path / ".report.md.planted.tmp").symlink_to(victim)
    (tmp_path / f".report.md.{os.getpid()}.tmp").symlink_to(victim)  # the old, predictable name
    write_atomic(target, "the report")
    assert victim.read_text() == "precious" and target.read_text() == "the report"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.is_symlink()) == ["report.md", "victim"]


def test_a_link_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "ds-doctor-h.md").symlink_to(victim)
    write_atomic(tmp_path / "ds-doctor-h.md", "the ticket")
    assert victim.read_text() == "precious" and not (tmp_path / "ds-doctor-h.md").is_symlink()


def test_only_the_machines_errors_are_named_as_a_disk_failure() -> None:
    assert disk_failure(OSError(errno.ENOSPC, "No space left on device", "/out/r.json")) == (
        "cannot write /out/r.json: No space left on device"
    )
    assert disk_failure(OSError(errno.EIO, "Input/output error")) == "cannot write: Input/output error"
    assert disk_failure(OSError(errno.ENOENT, "No such file", "/x")) is None
    assert disk_failure(ValueError("no")) is None
    assert errno.EDQUOT in DISK_ERRNOS and errno.EROFS in DISK_ERRNOS


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs, mounted for the test (root only) and unmounted after."""
    mount = tmp_path / "disk"
    mount.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave_pages: int = 0) -> None:
    """Fill the disk page by page until it is full, then free `leave_pages` pages."""
    fillers = []
    try:
        while True:
            filler = disk / f"filler-{len(fillers)}"
            fillers.append(filler)
            with filler.open("wb") as handle:
                handle.write(b"\0" * PAGE)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    for filler in fillers[:leave_pages]:
        filler.unlink()


def ours(disk: Path) -> list[str]:
    return sorted(p.name for p in disk.iterdir() if not p.name.startswith("filler-"))


def test_a_full_disk_is_an_error_naming_the_path_and_no_temp_is_left(small_disk: Path) -> None:
    fill(small_disk)
    with pytest.raises(OSError) as caught:
        write_atomic(small_disk / "r.json", "x" * 10_000)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(small_disk / "r.json")
    assert ours(small_disk) == []


def test_a_report_whose_markdown_does_not_fit_leaves_no_json_alone(small_disk: Path) -> None:
    """Room for the JSON and not for its Markdown: neither stays (a ticket reader would get half a pair)."""
    report = a_report(every_outcome())
    pages = -(-len(report.to_json().encode()) // PAGE) + 1
    fill(small_disk, leave_pages=pages)
    with pytest.raises(OSError) as caught:
        write_reports(report, small_disk)
    assert caught.value.errno == errno.ENOSPC and str(caught.value.filename).endswith((".md", ".html"))
    assert ours(small_disk) == []


def test_report_onto_a_full_disk_is_one_line_and_exit_2(
    small_disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "ds-doctor-h-20261126T000000Z.json"
    source.write_text(a_report(every_outcome()).to_json())
    fill(small_disk)
    code, _, err = run_cli(capsys, "report", str(source), "--out", str(small_disk))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert (
        err.startswith(f"ds-doctor: error: cannot write {small_disk}/") and "No space left on device" in err
    )
    assert ours(small_disk) == []


def test_junit_onto_a_full_device_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "ds-doctor-h-20261126T000000Z.json"
    source.write_text(a_report(every_outcome()).to_json())
    code, _, err = run_cli(
        capsys, "report", str(source), "--junit", "/dev/full", "--out", str(tmp_path / "o")
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "/dev/full" in err and "No space" in err, err


def test_a_runs_report_that_does_not_fit_says_where_its_results_are(small_disk: Path, tmp_path: Path) -> None:
    """`run` onto a disk that fills up before its report: the results are in the run directory (on another disk
    here), and the line says how to write the report from it."""
    fill(small_disk)
    with pytest.raises(CannotWrite) as caught:
        write_reports_of_run(a_report(every_outcome()), small_disk, tmp_path / "run-h-1")
    line = str(caught.value)
    assert line.startswith(f"cannot write {small_disk}/") and "No space left on device" in line
    assert line.endswith(f"`ds-doctor report {tmp_path / 'run-h-1'}` writes the report once there is room")
    assert ours(small_disk) == []


def test_a_long_name_of_wide_characters_still_gets_a_temp_beside_it(tmp_path: Path) -> None:
    """255 bytes is the limit of a name, not 255 characters: the temp's name is cut by bytes."""
    target = tmp_path / ("é" * 120 + ".md")  # 243 bytes
    write_atomic(target, "text")
    assert target.read_text() == "text" and [p.name for p in tmp_path.iterdir()] == [target.name]

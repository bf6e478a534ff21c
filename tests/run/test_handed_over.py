"""A run directory handed over (a ticket's attachment, a colleague's folder) is data its author chose: `ds-doctor
report RUN_DIR` reads only regular files inside it, never through a link, each bounded, and walks it boundedly.
Each test plants one thing in a real run directory (tests/run/test_recover.py's) and runs the real CLI."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ds_doctor import rundir
from ds_doctor.cli import main
from ds_doctor.reports.model import Outcome
from ds_doctor.rundir import RankLine, RunDir
from tests.run.test_recover import a_run_dir

RANK1 = Path("ws2-cpu-0") / "rank1.jsonl"


def report(capsys: pytest.CaptureFixture[str], run: RunDir, out: Path) -> tuple[int, str]:
    """`ds-doctor report RUN_DIR`, in a thread so that a hang is seen as one (the FIFO)."""
    out.mkdir(exist_ok=True)
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(main(["report", str(run.path), "--out", str(out)])))
    worker.daemon = True
    worker.start()
    worker.join(timeout=60)
    assert codes, "report RUN_DIR hung"
    return codes[0], capsys.readouterr().err


def planted(tmp_path: Path) -> RunDir:
    run = a_run_dir(tmp_path)
    (run.path / RANK1).unlink()
    return run


def test_a_fifo_as_a_rank_file_is_skipped_with_a_line_not_waited_on(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = planted(tmp_path)
    os.mkfifo(run.path / RANK1)
    code, err = report(capsys, run, tmp_path / "out")
    assert code == 0 and f"{RANK1.name}: not a regular file; skipped" in err


def test_a_rank_file_linked_to_dev_zero_is_not_followed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = planted(tmp_path)
    (run.path / RANK1).symlink_to("/dev/zero")
    code, err = report(capsys, run, tmp_path / "out")
    assert code == 0 and "a link: files in a run directory are read, never followed; skipped" in err


def test_a_rank_file_linked_to_a_private_file_is_not_read_into_the_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Root following another user's link would read a file its owner cannot, and publish it in the report."""
    run = planted(tmp_path)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    line = RankLine(
        "comm[broadcast-ws2]", 1, 2, Outcome.FAIL, reason="ROOT-ONLY-987654"
    )  # the case rank 1 left
    (private / "rank1.jsonl").write_text(line.to_json() + "\n")
    (run.path / RANK1).symlink_to(private / "rank1.jsonl")
    # and a whole launch folder that is a link to someone else's
    (run.path / "ws3-cpu-0").symlink_to(private)
    code, _ = report(capsys, run, tmp_path / "out")
    assert code == 0
    written = "".join(p.read_text() for p in (tmp_path / "out").glob("*.json"))
    assert "ROOT-ONLY-987654" not in written and str(private) not in written


def test_a_folder_at_a_rank_files_name_is_skipped_with_a_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = planted(tmp_path)
    (run.path / RANK1).mkdir()
    code, err = report(capsys, run, tmp_path / "out")
    assert code == 0 and "rank1.jsonl: not a regular file; skipped" in err


def test_a_run_directory_thousands_of_folders_deep_is_walked_boundedly(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Was: RecursionError, exit 3 (pathlib's recursive glob nests a generator per level)."""
    run = a_run_dir(tmp_path)
    levels = 1200
    fd = os.open(run.path, os.O_RDONLY)
    try:  # each level made relative to the last (a path that long cannot be named whole)
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    finally:
        os.close(fd)
    try:
        code, err = report(capsys, run, tmp_path / "out")
        assert code == 0, err
        assert rundir.MAX_WALK_DEPTH < levels
    finally:
        remove_chain(run.path, levels)


def remove_chain(top: Path, levels: int) -> None:
    """The chain of `d` folders removed from the bottom, without recursion (shutil.rmtree, and pytest's clean-up
    of old temporary folders with it, recurses per level)."""
    fds = [os.open(top, os.O_RDONLY)]
    for _ in range(levels):
        fds.append(os.open("d", os.O_RDONLY, dir_fd=fds[-1]))
    os.unlink("f", dir_fd=fds[-1])
    while len(fds) > 1:
        os.close(fds.pop())
        os.rmdir("d", dir_fd=fds[-1])
    os.close(fds[0])


def test_a_file_time_beyond_any_calendar_is_not_the_runs_end(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """tmpfs keeps any time a user sets (ext4 clamps them): was `ValueError: year 36812 is out of range`, exit 3."""
    shm = Path("/dev/shm")
    if not os.access(shm, os.W_OK):
        pytest.skip("no writable /dev/shm (a tmpfs) here")
    where = shm / f"ds-doctor-test-{os.getpid()}"
    where.mkdir()
    try:
        run = a_run_dir(where)
        os.utime(run.manifest, (2**40, 2**40))
        code, err = report(capsys, run, tmp_path / "out")
        assert code == 0, err
    finally:
        import shutil

        shutil.rmtree(where)


@pytest.mark.parametrize("findings", [["a string"], [{"severity": 1}], {"a": 1}, [[]]])
def test_a_rank_line_with_findings_of_another_shape_is_skipped_with_a_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, findings: object
) -> None:
    """Was: AttributeError, exit 3."""
    import json

    run = planted(tmp_path)
    line = json.loads(RankLine("comm[broadcast-ws2]", 1, 2, Outcome.PASS).to_json())
    (run.path / RANK1).write_text(json.dumps({**line, "findings": findings}) + "\n")
    code, err = report(capsys, run, tmp_path / "out")
    assert code == 0 and "line 1 is truncated or not a result line; skipped" in err, err


def test_a_rank_line_naming_an_issue_this_catalog_lacks_is_merged_without_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Was: KeyError, exit 3 (a newer ds-doctor's run, or a forged line)."""
    import json

    run = planted(tmp_path)
    for rank in (0, 1):
        line = RankLine("comm[broadcast-ws2]", rank, 2, Outcome.PASS, known_issue="no_such_issue").to_json()
        with (run.path / "ws2-cpu-0" / f"rank{rank}.jsonl").open("a") as handle:
            handle.write(line + "\n")
    code, err = report(capsys, run, tmp_path / "out")
    assert code == 0, err
    written = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert "no_such_issue" not in json.dumps(written["results"])

"""What ds-doctor acts on comes only from files only it could write, checked against what it started: a run in a
group-shared folder (umask 002) is written by its owner alone, a heartbeat another user could have written is not
read, a pid a heartbeat names outside the launch is never signalled, and an output path that is another user's link
is replaced, never written through (docs/threat-model.md)."""

from __future__ import annotations

import datetime as dt
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ds_doctor import files
from ds_doctor.files import output_kind, write_atomic, write_output
from ds_doctor.forensics import capture
from ds_doctor.options import check_writable_file
from ds_doctor.run.launch import Launch
from ds_doctor.rundir import Beat, LaunchDir, RunDir

NOBODY = 65534
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="changing a file's owner needs root")


@pytest.fixture
def shared_umask() -> Iterator[None]:
    """The umask of a group-shared project folder, put back after (RunDir.create narrows the process's own)."""
    before = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(before)


def writable_by_others(path: Path) -> bool:
    return bool(os.lstat(path).st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def test_a_run_in_a_group_shared_folder_is_written_by_its_owner_alone(
    tmp_path: Path, shared_umask: None
) -> None:
    run = RunDir.create(tmp_path, "node", dt.datetime(2026, 11, 29), 1)
    launch = LaunchDir(run.path / "ws2-cpu-0")
    launch.write_cases(["a"])
    write_atomic(launch.heartbeat(0), Beat(0, "a", "start", 1.0, 1.0, 1).to_json())
    # what the ranks write: processes started after the run began inherit the narrowed umask
    child = launch.path / "rank0.log"
    subprocess.run([sys.executable, "-c", f"open({str(child)!r}, 'w').write('x')"], check=True)
    for path in (run.path, launch.path, launch.cases, launch.heartbeat(0), child):
        assert not writable_by_others(path), f"{path} {oct(os.lstat(path).st_mode)}"


def beat_file(launch: LaunchDir, rank: int, pid: int) -> Path:
    launch.path.mkdir(parents=True, exist_ok=True)
    write_atomic(
        launch.heartbeat(rank), Beat(rank, "case", "forward", time.time(), time.time(), pid).to_json()
    )
    return launch.heartbeat(rank)


@root_only
def test_a_heartbeat_someone_else_could_write_is_not_read(tmp_path: Path) -> None:
    launch = LaunchDir(tmp_path / "ws3-cpu-0")
    beat_file(launch, 0, 100)
    os.chmod(beat_file(launch, 1, 101), 0o664)  # group-writable
    os.chown(beat_file(launch, 2, 102), NOBODY, NOBODY)  # another user's
    (tmp_path / "elsewhere.json").write_text(Beat(3, "case", "forward", 1.0, 1.0, 103).to_json())
    launch.heartbeat(3).symlink_to(tmp_path / "elsewhere.json")  # a link to a beat
    assert set(launch.read_beats()) == {0}


@pytest.mark.parametrize(
    "fields",
    [
        {"rank": "0"},
        {"pid": "1234"},
        {"pid": True},
        {"pid": -1},
        {"case_started": "12 s"},
        {"case": 7},
        {"extra": 1},
    ],
)
def test_a_heartbeat_of_another_shape_is_not_a_beat(tmp_path: Path, fields: dict[str, object]) -> None:
    import json

    launch = LaunchDir(tmp_path / "ws1-cpu-0")
    line = {"rank": 0, "case": "c", "stage": "s", "case_started": 1.0, "time": 1.0, "pid": 10, **fields}
    launch.path.mkdir()
    write_atomic(launch.heartbeat(0), json.dumps(line))
    assert launch.read_beats() == {}


SIGNALLED = """
import signal, sys, time
flag = sys.argv[1]
signal.signal(signal.SIGUSR2, lambda *_: open(flag, "w").write("signalled"))
open(flag + ".ready", "w").close()
while True:
    time.sleep(0.05)
"""


def waiting(flag: Path) -> subprocess.Popen[bytes]:
    """A process that notes a SIGUSR2 (the stack request) in `flag`, once its handler is in place."""
    proc = subprocess.Popen([sys.executable, "-c", SIGNALLED, str(flag)])
    deadline = time.monotonic() + 60
    while not Path(f"{flag}.ready").exists():
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    return proc


def test_a_heartbeat_naming_a_process_outside_the_launch_is_never_signalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second line of defence: a beat its owner wrote (a rank's) naming another process, as a beat rewritten
    by anyone would. Only the launch's own processes are asked for their stacks."""
    outsider, rank = waiting(tmp_path / "outsider"), waiting(tmp_path / "rank")
    try:
        launch = Launch.__new__(Launch)
        launch.dir = LaunchDir(tmp_path / "ws2-cpu-0")
        launch.proc = rank  # the launch's torchrun: the tree checked against
        beat_file(launch.dir, 0, outsider.pid)
        beat_file(launch.dir, 1, rank.pid)
        take = capture.take
        monkeypatch.setattr(capture, "take", lambda where, pids: take(where, pids, bound_s=0.5))
        launch._take_evidence()
        time.sleep(0.5)
        assert (tmp_path / "rank").read_text() == "signalled"
        assert not (tmp_path / "outsider").exists()
        assert outsider.poll() is None
    finally:
        for proc in (outsider, rank):
            proc.kill()
            proc.wait()


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A file of root's and, in a folder anyone writes, a link to it owned by another user."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    link = shared / "out.xml"
    link.symlink_to(victim)
    os.lchown(link, NOBODY, NOBODY)
    return victim, link


@root_only
def test_an_output_at_another_users_link_replaces_the_link_and_leaves_its_target(
    planted: tuple[Path, Path],
) -> None:
    victim, link = planted
    assert output_kind(link) == "file"
    check_writable_file(link, "--junit")
    write_output(link, "<testsuites/>\n")
    assert victim.read_text() == "precious\n"
    assert not link.is_symlink() and link.read_text() == "<testsuites/>\n"


@root_only
def test_a_log_opened_at_another_users_link_is_a_new_file(planted: tuple[Path, Path]) -> None:
    victim, link = planted
    with files.fresh_file(link) as handle:
        handle.write("moment\n")
    assert victim.read_text() == "precious\n"
    assert link.read_text() == "moment\n"


def test_an_output_at_ones_own_link_still_goes_where_it_points(tmp_path: Path) -> None:
    target = tmp_path / "kept" / "report.xml"
    target.parent.mkdir()
    target.write_text("old")
    (tmp_path / "latest.xml").symlink_to(target)
    write_output(tmp_path / "latest.xml", "new")
    assert target.read_text() == "new" and (tmp_path / "latest.xml").is_symlink()


REFUSED = """
import os, sys
from pathlib import Path
from ds_doctor.files import OutputError, write_output  # before: nobody may not read this Python's folders
os.setgid(65534); os.setuid(65534)
try:
    write_output(Path(sys.argv[1]), "x")
except OutputError as exc:
    print(exc)
"""


@root_only
def test_a_user_not_allowed_to_replace_another_users_link_gets_one_line(tmp_path: Path) -> None:
    """Not root, in a sticky folder: the link cannot be replaced, and it is not followed either."""
    shared = Path("/tmp") / f"ds-doctor-sticky-{os.getpid()}"
    shared.mkdir(mode=0o1777)
    os.chmod(shared, 0o1777)
    try:
        victim = shared / "victim"
        victim.write_text("precious\n")
        os.chmod(victim, 0o666)  # writable by the user who runs: only the link's owner chooses the target
        link = shared / "out.xml"
        link.symlink_to(victim)
        os.lchown(link, 12345, 12345)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        proc = subprocess.run(
            [sys.executable, "-c", REFUSED, str(link)], capture_output=True, text=True, env=env, timeout=120
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "link owned by another user (uid 12345)" in proc.stdout
        assert victim.read_text() == "precious\n"
    finally:
        for child in shared.iterdir():
            child.unlink()
        shared.rmdir()


@root_only
def test_as_root_a_run_is_not_made_where_another_user_could_swap_its_folder(tmp_path: Path) -> None:
    """A group-writable folder without the sticky bit lets a group member rename the new run folder away and put
    a link to their own in its place between two of root's writes (was: root chmod-ed, then wrote, through it)."""
    shared = tmp_path / "project"
    shared.mkdir()
    os.chmod(shared, 0o2775)
    with pytest.raises(files.CannotWrite, match=r"writable by others .* without the sticky bit"):
        RunDir.create(shared / "out", "node", dt.datetime(2026, 11, 29), 1)
    os.chmod(shared, 0o1777)  # sticky: nobody renames an entry of another's
    run = RunDir.create(shared / "out", "node", dt.datetime(2026, 11, 29), 2)
    assert stat.S_IMODE(os.lstat(run.path).st_mode) == 0o700  # its logs hold tokens until they are scrubbed


def test_folders_made_for_a_run_are_writable_by_their_owner_alone_under_umask_0(
    tmp_path: Path, shared_umask: None
) -> None:
    from ds_doctor.options import writable_dir
    from ds_doctor.rundir import owner_writes_only

    os.umask(0)
    owner_writes_only()
    made = writable_dir(tmp_path / "a" / "b", "--out")
    assert not writable_by_others(made) and not writable_by_others(made.parent)


@root_only
def test_an_output_reached_through_another_users_link_on_the_way_is_refused(
    planted: tuple[Path, Path],
) -> None:
    """The user's own link leading to another user's link to root's file (was: written through), and a folder on
    the way that is another user's link."""
    import click

    from ds_doctor.files import OutputError
    from ds_doctor.options import writable_dir

    victim, link = planted
    mine = link.parent.parent / "mine.xml"
    mine.symlink_to(link)
    with pytest.raises(OutputError, match="a link owned by another user"):
        write_output(mine, "x")
    assert victim.read_text() == "precious\n" and link.is_symlink()
    folder_link = link.parent / "reports"
    folder_link.symlink_to(link.parent.parent)
    os.lchown(folder_link, NOBODY, NOBODY)
    with pytest.raises(OutputError, match="a link owned by another user"):
        write_output(folder_link / "out.json", "x")
    with pytest.raises(click.BadParameter, match="a link owned by another user"):
        writable_dir(folder_link, "--out")


@root_only
def test_a_table_partition_planted_as_another_users_link_is_not_written_through(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from ds_doctor.reports.model import Outcome
    from ds_doctor.table.parquet import TableError, write_table
    from ds_doctor.table.rows import night_of
    from tests.reports.samples import a_report, case

    report = a_report([case(Outcome.PASS, "ok")])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    night = tmp_path / "table" / f"night={night_of(report.started_at).isoformat()}"
    night.mkdir(parents=True)
    for name in ("node=" + report.hardware.host,):
        (night / name).symlink_to(elsewhere)
        os.lchown(night / name, NOBODY, NOBODY)
    with pytest.raises(TableError, match="a link owned by another user"):
        write_table(report, tmp_path / "table", "run-1")
    assert list(elsewhere.iterdir()) == []


ROOTS_LINKS = """
import os, sys
from pathlib import Path
from ds_doctor.files import foreign_in_path, output_kind
os.setgid(65534); os.setuid(65534)
print(foreign_in_path(Path("/dev/stdout")), output_kind(Path("/dev/stdout")))
"""


@root_only
def test_roots_links_stay_followed_for_any_user() -> None:
    """`/dev/stdout` is root's link: a user's `--junit /dev/stdout` is the stream it names, as before."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run(
        [sys.executable, "-c", ROOTS_LINKS], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.stdout.split() == ["None", "stream"], proc.stderr[-2000:]


@root_only
def test_reports_are_not_written_into_a_folder_swapped_for_another_users_link(tmp_path: Path) -> None:
    """The folder checked when the command line was read, then swapped (A9 of docs/threat-model.md): checked again
    as the reports are written."""
    from ds_doctor.run.build import write_reports
    from tests.reports.samples import a_report

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    out = tmp_path / "shared" / "out"
    out.parent.mkdir()
    out.symlink_to(private)
    os.lchown(out, NOBODY, NOBODY)
    with pytest.raises(files.CannotWrite, match="link owned by another user"):
        write_reports(a_report([]), out)
    assert list(private.iterdir()) == []

"""torch's build lock judged for real: a live process holding it (torch's own FileBaton, in a process of its own),
the same lock after that process was SIGKILLed, ds-doctor's builder record, and a lock taken again meanwhile."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ds_doctor.ops import locks

#: the JIT's own lock: created with O_EXCL and held open until released, as torch's _jit_compile does
HOLD = (
    "import sys, time; from torch.utils.file_baton import FileBaton; "
    "baton = FileBaton(sys.argv[1]); assert baton.try_acquire(); print('held', flush=True); time.sleep(600)"
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    folder = tmp_path / "cpu_adam"
    folder.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder / "lock")], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait()


def test_a_lock_a_live_build_holds_is_waited_on_and_names_the_holder(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    state = locks.judge(tmp_path / "cpu_adam")
    assert state.state == "held"
    assert [h.pid for h in state.holders] == [holder.pid] and state.holders[0].host == socket.gethostname()
    assert "file_baton" in state.holders[0].command or "python" in state.holders[0].command
    line = state.waiting_line("cpu_adam")
    assert f"pid {holder.pid}" in line and str(tmp_path / "cpu_adam" / "lock") in line
    assert locks.heal_folder(tmp_path / "cpu_adam", "cpu_adam") is None  # never removed while it lives
    assert (tmp_path / "cpu_adam" / "lock").exists()


def test_the_lock_of_a_killed_build_is_stale_and_cleared_with_one_line(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    folder = tmp_path / "cpu_adam"
    assert (folder / "lock").exists()  # what torch's own waiters would wait on forever
    state = locks.judge(folder)
    assert state.state == "stale" and "no process on this host holds it" in state.why
    line = locks.heal_folder(folder, "cpu_adam")
    assert line is not None and line.startswith("cpu_adam: removed a build lock left behind")
    assert str(folder / "lock") in line
    assert not (folder / "lock").exists() and list(folder.iterdir()) == []
    assert locks.judge(folder).state == "free"


def test_a_free_folder_is_free_and_nothing_is_said(tmp_path: Path) -> None:
    assert locks.judge(tmp_path).state == "free"
    assert locks.heal_folder(tmp_path, "cpu_adam") is None


def test_a_record_names_ds_doctors_builder_while_it_lives_and_its_death_after(tmp_path: Path) -> None:
    """ds-doctor's builder writes its record before torch takes the lock: between two steps (no file open) the lock
    is still held by a live builder; once that builder is gone, it is stale."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        (tmp_path / locks.BUILDER_RECORD).write_text(
            json.dumps(
                {
                    "pid": sleeper.pid,
                    "host": socket.gethostname(),
                    "boot": locks._boot_id(),
                    "started": time.time(),
                }
            )
        )
        (tmp_path / locks.LOCK).write_bytes(b"")
        state = locks.judge(tmp_path)
        assert state.state == "held" and [h.pid for h in state.holders] == [sleeper.pid]
    finally:
        sleeper.kill()
        sleeper.wait()
    state = locks.judge(tmp_path)
    assert state.state == "stale" and f"pid {sleeper.pid}" in state.why
    assert locks.clear_stale(state) and not (tmp_path / locks.BUILDER_RECORD).exists()


def test_on_a_shared_filesystem_another_hosts_builder_is_waited_on_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder other hosts share (NFS, Lustre): a lock no process here holds may be another node's live build."""
    monkeypatch.setattr(locks, "on_shared_filesystem", lambda path: True)
    monkeypatch.setattr(locks, "filesystem_type", lambda path: "nfs4")
    (tmp_path / locks.LOCK).write_bytes(b"")
    state = locks.judge(tmp_path)
    assert state.state == "unknown" and "nfs4" in state.why
    assert "if no build of cpu_adam runs anywhere, delete that file" in state.waiting_line("cpu_adam")
    record = {"pid": 4242, "host": "node-17", "boot": "x", "started": time.time() - 60}
    (tmp_path / locks.BUILDER_RECORD).write_text(json.dumps(record))
    state = locks.judge(tmp_path)
    assert state.state == "unknown" and state.holders == (locks.Holder(4242, "node-17"),)
    assert "node-17" in state.why
    # quiet for longer than any compile step: left behind
    old = time.time() - locks.QUIET_ON_SHARED_S - 60
    (tmp_path / locks.BUILDER_RECORD).unlink()
    os.utime(tmp_path / locks.LOCK, (old, old))
    os.utime(tmp_path, (old, old))
    assert locks.judge(tmp_path).state == "stale"


def test_a_lock_taken_again_after_it_was_judged_is_put_back(tmp_path: Path) -> None:
    """Judged stale, then a new builder removed it and took the folder before the clearing: its lock stays."""
    (tmp_path / locks.LOCK).write_bytes(b"")
    state = locks.judge(tmp_path)
    assert state.state == "stale"
    (tmp_path / locks.LOCK).unlink()
    fresh = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / locks.LOCK)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert fresh.stdout is not None and fresh.stdout.readline().strip() == "held"
        assert not locks.clear_stale(state)
        assert (tmp_path / locks.LOCK).exists() and locks.judge(tmp_path).state == "held"
        assert sorted(p.name for p in tmp_path.iterdir()) == [locks.LOCK]
    finally:
        fresh.kill()
        fresh.wait()


def test_the_filesystem_of_a_folder_is_read_from_the_mount_table(tmp_path: Path) -> None:
    assert locks.filesystem_type(tmp_path) not in ("", *locks.NETWORK_FILESYSTEMS)
    assert locks.filesystem_type(Path("/proc/self")) == "proc"


def test_a_builder_that_ended_unreaped_is_gone(tmp_path: Path) -> None:
    """A killed builder whose parent is a subreaper that does not wait (a run's doctor is one for orphans) stays a
    zombie: `kill(pid, 0)` still finds it, yet it holds nothing and never will."""
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 60
    while not locks._zombie(ended.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert locks._zombie(ended.pid)
        record = {
            "pid": ended.pid,
            "host": socket.gethostname(),
            "boot": locks._boot_id(),
            "started": time.time(),
        }
        (tmp_path / locks.BUILDER_RECORD).write_text(json.dumps(record))
        (tmp_path / locks.LOCK).write_bytes(b"")
        state = locks.judge(tmp_path)
        assert state.state == "stale" and f"pid {ended.pid}" in state.why
    finally:
        ended.wait()


def test_a_folder_of_ops_is_healed_of_its_killed_builds_only(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    """What the test session does before DeepSpeed loads ops in its own process: a build killed mid-way (fused_adam)
    leaves a lock no process holds, cleared with one line; the live build beside it (cpu_adam) keeps its lock."""
    killed = tmp_path / "fused_adam"
    killed.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(killed / "lock")], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    proc.kill()
    proc.wait()
    (lines,) = [locks.heal_root(tmp_path)]
    assert len(lines) == 1 and lines[0].startswith("fused_adam: removed a build lock left behind")
    assert not (killed / "lock").exists() and (tmp_path / "cpu_adam" / "lock").exists()
    assert locks.heal_root(tmp_path) == [] and locks.heal_root(tmp_path / "absent") == []

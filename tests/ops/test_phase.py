"""The op build phase for real: DeepSpeed's shared-memory comm op compiled by torch's JIT in a copy of the ops
folder, killed at several moments (SIGKILL of the whole build mid-compile, the phase's own bound, SIGTERM before the
compiler starts), then built to the end with its progress said, and a run that finds a stale lock and passes."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ds_doctor.ops import cache, locks, phase
from tests.conftest import requires_deepspeed
from tests.test_e2e import ROOT, ds_doctor

SHM = "deepspeed_shm_comm"
#: how long the test waits for a step it watches for (a compiler to start, a process to end): a hang, not speed
GENEROUS_S = 300.0  # longer than tests.bounds.GENEROUS_S: a compile under load


def built_root() -> Path:
    """This environment's ops, built (make's set-up builds them; built here where it did not)."""
    root = cache.likely_root(os.environ)
    if root is None or not cache.stamped(root):
        subprocess.run([sys.executable, "-m", "ds_doctor.ops"], check=True, capture_output=True, timeout=3600)
        root = cache.likely_root(os.environ)
    assert root is not None and (root / SHM / f"{SHM}.so").exists()
    return root


@pytest.fixture
def ext(tmp_path: Path) -> Path:
    """A copy of the built ops (times kept: ninja sees them up to date) with one of the shm op's two objects removed
    (and the op's library), so that loading it compiles that source again and links (about 25 s of a core). Both
    removed, each build below compiled two sources at once: twice the CPU for the same steps."""
    source = built_root()
    ext = tmp_path / "ext"
    for op in ("cpu_adam", "fused_adam", SHM):
        shutil.copytree(source / op, ext / op, ignore=shutil.ignore_patterns("lock*", locks.BUILDER_RECORD))
    for name in ("shm_interface.o", f"{SHM}.so"):
        (ext / SHM / name).unlink()
    return ext


def until(what: str, check: object) -> None:
    deadline = time.monotonic() + GENEROUS_S
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.1)
    raise AssertionError(f"never saw: {what}")


def compiling(pid: int) -> bool:
    try:
        below = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return False
    return any("cc1plus" in name(p) for p in below)


def name(process: psutil.Process) -> str:
    """The process's name, or "" where it ended since it was listed (the build's short-lived children do)."""
    try:
        return process.name()
    except psutil.Error:
        return ""


def ops_command(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ds_doctor.ops"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=ROOT,
    )


@pytest.mark.multirank
@pytest.mark.loaded  # `make test` runs it beside its sessions: a build killed on a busy node, as the field meets it
@requires_deepspeed
def test_a_build_killed_at_any_moment_is_healed_and_the_next_run_passes(ext: Path, tmp_path: Path) -> None:
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(ext), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    lock = ext / SHM / locks.LOCK

    # 1. SIGKILL to every process of the build (the doctor, its build process, ninja, the compiler) while it
    # compiles: torch's lock stays behind, which every later build or load would wait on forever
    started = time.monotonic()
    killed = ops_command(env)
    until("the compiler running under the build", lambda: compiling(killed.pid))
    to_compiler = time.monotonic() - started
    for proc in [psutil.Process(killed.pid), *psutil.Process(killed.pid).children(recursive=True)]:
        # at once, as the OOM killer or a node's reboot would: nothing cleans up (a child that ended since it was
        # listed is passed over)
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    killed.wait(timeout=GENEROUS_S)
    assert lock.exists()

    # 2. the next build clears that lock and says so; SIGTERM to it as soon as it took the lock again: it says it was
    # stopped, and leaves no lock
    stopped = ops_command(env)
    events = tmp_path / "cache" / "ds-doctor" / "ops-build" / phase.EVENTS_NAME
    until(
        "the stale lock cleared and taken again",
        lambda: events.exists() and '"cleared"' in events.read_text() and lock.exists(),
    )
    stopped.send_signal(signal.SIGTERM)
    out, _ = stopped.communicate(timeout=GENEROUS_S)
    assert f"{SHM}: removed a build lock left behind ({lock}" in out, out
    assert stopped.returncode == 128 + signal.SIGTERM, out
    assert "stopped by SIGTERM" in out and not lock.exists(), out

    # 3. the phase's own bound runs out while the compiler runs (it took `to_compiler` to start in step 1; the compile
    # takes ~30 s more): stopped (SIGTERM, then SIGKILL), no lock left, and the line says what to do
    said: list[str] = []
    bound = to_compiler * 1.5 + 3
    ready = phase.build_ops(env, tmp_path / "bounded", said.append, bound_s=bound, progress_s=600)
    text = "\n".join(said)
    assert (
        "did not finish within" in text and "compiling shm" in text and "python -m ds_doctor.ops" in text
    ), text
    assert phase.BOUND_ENV in text and not lock.exists()
    assert ready.failure is not None and SHM in ready.failure and str(tmp_path / "bounded") in ready.failure

    # 4. to the end, with a line at least every `progress_s` naming what the compiler is on
    said = []
    ready = phase.build_ops(env, tmp_path / "full", said.append, progress_s=2.0)
    text = "\n".join(said)
    assert ready.failure is None, text
    assert {o.op: o.state for o in ready.ops} == {
        "cpu_adam": "loaded",
        "fused_adam": "loaded",
        SHM: "built",
    }, text
    assert f"{SHM}: still building" in text and "compiling shm" in text, text
    assert ready.folder == str(ext) and (ext / SHM / f"{SHM}.so").exists() and not lock.exists()

    # 5. a lock planted where no process holds it (a build killed before this run), and a run: the build phase says
    # and clears it before the first launch, and the DeepSpeed case passes
    planted = ext / "cpu_adam" / locks.LOCK
    planted.write_bytes(b"")
    run = ds_doctor(
        *("run", "-k", "zero_offload and z3-opt+param-bf16-ws1", "--out", str(tmp_path / "out"), "--json"),
        extra_env={"TORCH_EXTENSIONS_DIR": str(ext)},
        timeout=GENEROUS_S * 2,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert [r["outcome"] for r in json.loads(run.stdout)["results"]] == ["pass"]
    assert f"cpu_adam: removed a build lock left behind ({planted}" in run.stderr, run.stderr[-3000:]
    assert not planted.exists()


def test_a_build_process_that_dies_without_a_word_is_a_failure_and_leaves_no_stamp(tmp_path: Path) -> None:
    """The OOM killer or a crash ends the build process before it said anything: every case that needs the ops is
    told so, and no stamp says they are there (a later run would otherwise skip its build phase)."""
    planted = tmp_path / "planted" / "deepspeed"
    planted.mkdir(parents=True)
    (planted / "__init__.py").write_text("import os\nos._exit(9)\n")  # dies as the OOM killer's victim would
    (planted / "accelerator.py").write_text("")
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path / "planted"),
        "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"),
    }
    said: list[str] = []
    ready = phase.ensure_ops(env, tmp_path / "logs", said.append)
    assert ready.failure is not None and "exit code 9 before it finished" in ready.failure
    assert str(tmp_path / "logs") in ready.failure
    assert not list((tmp_path / "ext").glob("ds-doctor-ops-*.json"))

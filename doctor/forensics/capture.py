"""Evidence from a hung case, taken before its launch is killed.

On each rank (`arm`, at worker start): `faulthandler` is registered on `STACK_SIGNAL` to write every thread's
Python stack to the rank's stacks file (from the C signal handler: it works while the main thread sits in a C++
collective or holds the GIL), and a daemon thread waits for the parent's request file, then writes the rank's
collective record (torch's Flight Recorder, or the thin record) and its thread names.

In the parent (`take`, when a case overruns its timeout): write the request, signal each local rank and wait for
every rank's files, at most `TAKE_BOUND_S`; then `py-spy dump --native` where py-spy is installed, in what is left
of the bound. What did not come in time is simply missing from the report; the launch is killed either way.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from ds_doctor.files import write_atomic
from ds_doctor.rundir import LaunchDir

STACK_SIGNAL = signal.SIGUSR2
TAKE_BOUND_S = 10.0  # the most a timeout waits for the evidence before the launch is killed
PY_SPY_S = 8.0
PY_SPY_FLOOR_S = 2.0  # py-spy's least time, after the ranks' own evidence came or the bound passed
_POLL_S = 0.05
THREAD_NAME = "ds-doctor-forensics"


class Armed:
    """A rank's side: the open stacks file (faulthandler writes to its descriptor) and the waiting thread."""

    def __init__(self, launch: LaunchDir, rank: int, backend: str, thin: Any = None) -> None:
        self.launch, self.rank, self.backend, self.thin = launch, rank, backend, thin
        launch.forensics.mkdir(parents=True, exist_ok=True)
        self.stacks: IO[str] = launch.stacks_text(rank).open("w", encoding="utf-8")
        faulthandler.register(STACK_SIGNAL, file=self.stacks, all_threads=True, chain=False)
        self.thread = threading.Thread(target=self._wait, name=THREAD_NAME, daemon=True)
        self.thread.start()

    def _wait(self) -> None:
        while not self.launch.forensics_request.exists():
            time.sleep(0.1)
        try:
            self.write()
        finally:
            self.launch.forensics_done(self.rank).touch()

    def write(self) -> None:
        names = {str(t.ident): t.name for t in threading.enumerate() if t.ident is not None}
        names["skip"] = str(threading.get_ident())  # this thread: left out of the stacks
        write_atomic(self.launch.thread_names(self.rank), json.dumps(names))
        dump = self.thin.dump() if self.thin is not None else _recorder_dump(self.backend)
        if dump is not None:
            path = self.launch.flight_dump(self.rank)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.part")
            tmp.write_bytes(pickle.dumps(dump))
            os.replace(tmp, path)  # a rank killed while writing leaves no half a pickle


def _recorder_dump(backend: str) -> dict[str, Any] | None:
    from ds_doctor.forensics.flight import recorder_dump

    try:
        return recorder_dump(backend)
    except Exception as exc:
        return {"version": "", "pg_config": {}, "entries": [], "error": f"{type(exc).__name__}: {exc}"}


def arm(launch: LaunchDir, rank: int, backend: str) -> Armed:
    """Called by each worker before its process group starts (the thin record must wrap the collectives first)."""
    import torch._C._distributed_c10d as c10d_ext

    from ds_doctor.forensics.flight import recorder_available

    # an older torch reads the recorder's settings by their NCCL names
    if not hasattr(c10d_ext, "_dump_fr_trace"):
        for new, old in (
            ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"),
            ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
        ):
            if new in os.environ:
                os.environ.setdefault(old, os.environ[new])
    thin = None
    if not recorder_available():
        from ds_doctor.forensics.thin_record import ThinRecord

        thin = ThinRecord().install()
    return Armed(launch, rank, backend, thin)


def py_spy() -> str | None:
    """py-spy beside this Python (the venv ds-doctor runs from, whose bin is often not on PATH), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def _py_spy(pid: int) -> subprocess.Popen[str] | None:
    exe = py_spy()
    if exe is None:
        return None
    with contextlib.suppress(OSError):
        return subprocess.Popen(
            [exe, "dump", "--native", "--pid", str(pid)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
    return None


def take(launch: LaunchDir, pids: dict[int, int], bound_s: float = TAKE_BOUND_S) -> float:
    """Ask every local rank for its evidence and wait for it (at most `bound_s`), then py-spy's native stacks in
    what is left of the bound (never under `PY_SPY_FLOOR_S`); seconds it took. py-spy stops the process it reads,
    so run beside the request it held a rank's own thread still on a loaded box until the bound passed, and the
    collectives of that rank were missing. `pids` are the ranks' processes, each checked by the caller to be one
    its launch started (`ds_doctor.procs.tree_of`)."""
    started = time.monotonic()
    launch.forensics.mkdir(parents=True, exist_ok=True)
    write_atomic(launch.forensics_request, json.dumps({"time": time.time()}))
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, STACK_SIGNAL)
    while time.monotonic() - started < bound_s:
        if all(launch.forensics_done(rank).exists() for rank in pids):
            break
        time.sleep(_POLL_S)
    spies = {rank: spy for rank, pid in pids.items() if (spy := _py_spy(pid)) is not None}
    for rank, spy in spies.items():
        _keep_py_spy(launch, rank, spy, max(PY_SPY_FLOOR_S, bound_s - (time.monotonic() - started)))
    return time.monotonic() - started


def _keep_py_spy(launch: LaunchDir, rank: int, spy: subprocess.Popen[str], wait_s: float) -> None:
    try:
        out, _ = spy.communicate(timeout=min(wait_s, PY_SPY_S))
    except subprocess.TimeoutExpired:
        spy.kill()
        out = "py-spy did not finish in time"
    (launch.forensics / f"py-spy-rank{rank}.txt").write_text(out or "")

"""The op build as a phase of its own: before any launch, once per node and stack, with its own progress and bound.

A first run on a busy node used to build DeepSpeed's ops inside its launches, each rank under its case's setup
limit: every DeepSpeed case timed out in "setup: build FusedAdamBuilder" on a loaded box, the cases sharing those
launches with it too, and a build cut short left torch's lock behind for every later run. Here one process
(`ds_doctor.ops.child`) builds or loads the ops the run's cases need, before the first launch of each stack; no
case's clock runs meanwhile. The parent says when each op starts, a line at least every `PROGRESS_S` while one
builds (how long so far, what the compiler is on, the log's path) or waits on another builder's lock (who holds
it), and how each ended: built, rebuilt, loaded, installed or failed. The phase has its own generous bound
(`DS_DOCTOR_BUILD_TIMEOUT`, seconds); past it the build is stopped, its lock cleared, and the line says what to do.
The ranks then load the ops (`RankOptions.ops_failed` tells them at once when an op could not be built)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ds_doctor.ops import cache, interpreter_first, locks
from ds_doctor.procs import module_command

#: the longest the phase says nothing while it builds or waits
PROGRESS_S = 30.0
#: the phase's own bound, generous: a cold build of three ops took 11 minutes on a loaded 2-core box
BOUND_S = 3600.0
BOUND_ENV = "DS_DOCTOR_BUILD_TIMEOUT"
STOP_GRACE_S = 10.0
POLL_S = 0.25
LOG_NAME = "ops-build.log"
#: the states of an op the phase left in its folder (not `installed`: DeepSpeed's own install holds those)
PRESENT = ("built", "rebuilt", "loaded")
#: why ninja builds again an op that was there (torch's JIT rewrote nothing it did not have to)
REBUILT = (
    ": the build there was not this environment's as it is now (a job that built it with another ninja first on PATH, "
    "other compiler flags or headers); a job that loads it with another ninja rebuilds it again"
)
EVENTS_NAME = "ops-events.jsonl"


def bound_from(environ: Mapping[str, str]) -> float:
    """`DS_DOCTOR_BUILD_TIMEOUT` (seconds), or the default; a value that is not a positive number is a ValueError
    whose text is the one line to say."""
    raw = environ.get(BOUND_ENV)
    if raw is None or raw.strip() == "":
        return BOUND_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 < value <= 7 * 24 * 3600:
        raise ValueError(f"{BOUND_ENV}={raw[:40]!r}: not a number of seconds between 1 and 604800")
    return value


@dataclasses.dataclass(frozen=True)
class OpResult:
    """One op: `state` built, rebuilt, loaded, installed (pre-compiled into DeepSpeed), failed, or stopped."""

    op: str
    state: str
    seconds: float = 0.0
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class OpsReady:
    """What the phase left: the folder the ops are in (the ranks' `TORCH_EXTENSIONS_DIR`), each op, and the one
    reason every case that needs them is told where they are not all there."""

    folder: str | None
    ops: tuple[OpResult, ...] = ()
    log: str | None = None
    problem: str | None = None  # the phase's own: past its bound, or its process ended early
    unavailable: str | None = None  # DeepSpeed does not import: each case that needs it meets that itself

    @property
    def failure(self) -> str | None:
        failed = [f"{o.op}: {o.reason}" for o in self.ops if o.state in ("failed", "stopped")]
        if self.problem is None and not failed:
            return None
        where = f" (its log: {self.log})" if self.log else ""
        what = "; ".join(([self.problem] if self.problem else []) + failed)
        return f"DeepSpeed's ops were not built before the cases{where}: {what}"[:2000]


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def compiler_step(build_pid: int) -> str:
    """What the compiler is on: the units the build process's compilers have open (from their command lines), or ""
    where none runs."""
    import psutil

    try:
        below = psutil.Process(build_pid).children(recursive=True)
    except psutil.Error:
        return ""
    compiling, linking = [], []
    for proc in below:
        try:
            command = proc.cmdline()
        except psutil.Error:
            continue
        if not command or os.path.basename(command[0]) in ("ninja", "sh", "bash"):
            continue
        if "-c" in command[:-1]:
            compiling.append(os.path.basename(command[command.index("-c") + 1]))
        elif "-o" in command[:-1] and command[command.index("-o") + 1].endswith(".so"):
            linking.append(os.path.basename(command[command.index("-o") + 1]))
    units = sorted(set(compiling))
    if units:
        return "compiling " + ", ".join(units)
    return f"linking {', '.join(sorted(set(linking)))}" if linking else ""


class Watch:
    """The parent's view of the build process: its events turned into lines, and a progress line whenever
    `progress_s` passed without one."""

    def __init__(self, say: Callable[[str], None], log: Path, progress_s: float) -> None:
        self.say, self.log, self.progress_s = say, log, progress_s
        self.pid = 0  # the build process, once started
        self.started = self.last_said = time.monotonic()
        self.op: str | None = None
        self.op_started = self.started
        self.op_folder: Path | None = None
        self.waiting: str | None = None
        self.folder: str | None = None
        self.results: dict[str, OpResult] = {}
        self.unavailable: str | None = None
        self.finished = False  # the build process said it went through every op
        self.offset = 0

    def tell(self, line: str) -> None:
        self.say(f"ds-doctor: {line}")
        self.last_said = time.monotonic()

    def read(self, events: Path) -> None:
        try:
            with events.open("rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except OSError:
            return
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        for raw in complete.splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(raw)
                if isinstance(event, dict):
                    self.on_event(event)

    def on_event(self, event: dict[str, Any]) -> None:
        kind, op = event.get("event"), str(event.get("op", ""))
        if kind == "folder":
            self.folder = str(event.get("path"))
            self.tell(f"DeepSpeed's ops: {self.folder} ({event.get('why')})")
        elif kind == "start":
            self.op, self.op_started, self.waiting = op, time.monotonic(), None
            self.op_folder = Path(str(event.get("folder")))
            self.tell(f"{op}: building or loading (the build log: {self.log})")
        elif kind in ("waiting", "cleared"):
            self.waiting = str(event.get("holder") or "the build lock") if kind == "waiting" else None
            self.tell(str(event.get("line")))
        elif kind == "done":
            state, seconds = str(event.get("state")), float(event.get("seconds") or 0.0)
            self.results[op] = OpResult(op, state, seconds)
            said = f"{op}: {state} in {seconds:.1f} s{REBUILT if state == 'rebuilt' else ''}"
            self.tell(f"{op}: installed with DeepSpeed" if state == "installed" else said)
            self.op = None
        elif kind == "failed":
            reason = str(event.get("reason"))
            self.results[op] = OpResult(op, "failed", float(event.get("seconds") or 0.0), reason)
            self.tell(
                f"{op}: FAILED to build: {reason.splitlines()[0][:300] if reason else ''} (the log: {self.log})"
            )
            self.op = None
        elif kind == "finished":
            self.finished = True
            if event.get("error"):
                self.unavailable = str(event["error"])
                self.tell(f"{self.unavailable}: no op built")

    def tick(self) -> None:
        now = time.monotonic()
        if self.op is None or now - self.last_said < self.progress_s:
            return
        if self.waiting is not None:
            self.tell(f"{self.op}: still waiting for {self.waiting}, {_clock(now - self.op_started)} so far")
            return
        step = compiler_step(self.pid) or f"no compiler running (the build log: {self.log})"
        self.tell(f"{self.op}: still building, {_clock(now - self.op_started)} so far, {step}")

    def ready(self, problem: str | None = None) -> OpsReady:
        ops = list(self.results.values())
        if self.op is not None and self.op not in self.results:
            ops.append(OpResult(self.op, "stopped", time.monotonic() - self.op_started, problem or "stopped"))
        return OpsReady(self.folder, tuple(ops), str(self.log), problem, self.unavailable)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the build process (it releases torch's lock as Ctrl-C would), then SIGKILL its whole session: the
    compiler ninja started included."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=STOP_GRACE_S)


def _heal_after(watch: Watch) -> None:
    if watch.op_folder is not None and watch.op is not None:
        line = locks.heal_folder(watch.op_folder, watch.op)
        if line is not None:
            watch.tell(line)


def build_ops(
    env: Mapping[str, str],
    folder: Path,
    say: Callable[[str], None],
    bound_s: float = BOUND_S,
    progress_s: float = PROGRESS_S,
) -> OpsReady:
    """Build or load DeepSpeed's ops in a process of its own, in the environment `env` (the ranks'), its log and
    events in `folder`; every line said through `say`. Ctrl-C (KeyboardInterrupt) stops the build, clears its
    lock and goes on up."""
    folder.mkdir(parents=True, exist_ok=True)
    log, events = folder / LOG_NAME, folder / EVENTS_NAME
    events.write_bytes(b"")  # this phase's events only (a folder a run keeps, as `python -m ds_doctor.ops`'s)
    watch = Watch(say, log, progress_s)
    with log.open("ab") as output:
        proc = subprocess.Popen(
            [*module_command("ds_doctor.ops.child"), str(events)],
            env={**env, "PATH": interpreter_first(env.get("PATH"))},  # the ninja the ranks load with
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    watch.pid = proc.pid
    try:
        while proc.poll() is None:
            watch.read(events)
            if time.monotonic() - watch.started > bound_s:
                step = compiler_step(proc.pid)
                _stop(proc)
                watch.read(events)
                _heal_after(watch)
                return _over_bound(watch, bound_s, step)
            watch.tick()
            time.sleep(POLL_S)
    except BaseException:
        _stop(proc)
        watch.read(events)
        _heal_after(watch)
        raise
    watch.read(events)
    if proc.returncode != 0 or not watch.finished:  # a crash, the OOM killer: never a stamp of nothing built
        _heal_after(watch)
        return watch.ready(f"the build process ended with exit code {proc.returncode} before it finished")
    ready = watch.ready()
    if (
        ready.failure is None and ready.folder is not None
    ):  # the next run's quick look starts no build process
        cache.write_stamp(Path(ready.folder), [o.op for o in ready.ops if o.state in PRESENT])
    return ready


def _over_bound(watch: Watch, bound_s: float, step: str) -> OpsReady:
    problem = (
        f"the op build did not finish within {_clock(bound_s)} ({BOUND_ENV}){f', {step}' if step else ''}: it was "
        f"stopped. Build the ops alone first (`python -m ds_doctor.ops`, which says its progress), or give the "
        f"build longer with {BOUND_ENV}=<seconds>"
    )
    watch.tell(problem)
    return watch.ready(problem)


def ensure_ops(
    env: Mapping[str, str],
    folder: Path,
    say: Callable[[str], None],
    bound_s: float = BOUND_S,
    progress_s: float = PROGRESS_S,
) -> OpsReady:
    """The ops this environment (`env`, the ranks') needs, ready: a quick look first (a stamp the last phase left,
    every op as it left it, no lock: no process started), the build phase where anything is missing or changed (which
    stamps the folder once every op is there)."""
    root = cache.stamped_root(env)
    return OpsReady(str(root)) if root is not None else build_ops(env, folder, say, bound_s, progress_s)

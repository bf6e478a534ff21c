"""Launch: run a group of cases under a real `torchrun`, watch heartbeats, gather per-rank lines.

A case that overruns its timeout gets the launch killed (the whole process group) and is reported
`timeout` with the stage each rank was in; a rank that dies makes its in-progress case an `error`
with the exit code or signal and the tail of that rank's log. Either way the cases not yet run are
relaunched, so one bad case never costs the others.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from doctor.files import log_tail
from doctor.outcomes import Outcome
from doctor.plan import LaunchGroup, timeout_for
from doctor.procs import die_with_parent, kill_tree
from doctor.worker import LAUNCH, result_line, setup_name, setup_probe
from probes.base import Case

LAUNCH_TIMEOUT_S = 180.0  # process start, imports and process-group set-up
POLL_S = 0.2

#: on_event(kind, payload): kind is "stage" (case id, stage) or "case_done" (case id)
EventSink = Callable[[str, dict[str, Any]], None]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def loopback_interfaces() -> dict[str, str]:
    """Pin gloo's and NCCL's sockets to the loopback interface: a single-node run talks to nobody else."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address.startswith("127.") for a in addresses):
            return {"GLOO_SOCKET_IFNAME": name, "NCCL_SOCKET_IFNAME": name}
    return {}


def torchrun_command(group: LaunchGroup, launch_dir: Path, port: int) -> list[str]:
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes=1", f"--nproc-per-node={group.world_size}",
        "--master-addr=127.0.0.1", f"--master-port={port}",
        "--max-restarts=0", "--monitor-interval=0.5",
        "-m", "doctor.worker", "--launch-dir", str(launch_dir), "--backend", group.backend,
    ]


class JsonlTail:
    """Reads complete new lines of a JSONL file; a truncated last line waits for its end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        lines = []
        for raw in chunk[: end + 1].splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                lines.append(json.loads(raw))
        return lines


def read_heartbeats(launch_dir: Path, world_size: int) -> dict[int, dict[str, Any]]:
    beats = {}
    for rank in range(world_size):
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            beats[rank] = json.loads((launch_dir / f"heartbeat-rank{rank}.json").read_text())
    return beats


def exit_codes(torchrun_log: str) -> dict[int, int]:
    """Per-rank exit codes from torchrun's failure summary."""
    codes = {}
    for match in re.finditer(r"^\s+rank\s+:\s*(\d+).*\n\s+exitcode\s+:\s*(-?\d+)", torchrun_log, re.M):
        codes.setdefault(int(match.group(1)), int(match.group(2)))
    return codes


def signal_name(code: int | None) -> str | None:
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class Launch:
    """One torchrun process running some cases of a group."""

    def __init__(self, group: LaunchGroup, cases: list[Case], launch_dir: Path, timeout_override: float | None,
                 on_event: EventSink) -> None:
        self.group = group
        self.cases = cases
        self.dir = launch_dir
        self.timeout_override = timeout_override
        self.on_event = on_event
        self.lines: dict[str, dict[int, dict[str, Any]]] = {}
        self.tails = {r: JsonlTail(launch_dir / f"rank{r}.jsonl") for r in range(group.world_size)}
        self.timed_out: tuple[str, dict[int, dict[str, Any]]] | None = None
        self.returncode: int | None = None
        self.last_stage: dict[int, tuple[str, str]] = {}

    def limit_for(self, name: str) -> float:
        """Seconds a heartbeat name may stay unfinished: the launch's own, a setup's, or a case's."""
        return LAUNCH_TIMEOUT_S if name == LAUNCH else timeout_for(name, self.timeout_override)

    def complete(self, case_id: str) -> bool:
        return len(self.lines.get(case_id, {})) == self.group.world_size

    def run(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "cases.json").write_text(json.dumps({"cases": [c.id for c in self.cases]}))
        command = torchrun_command(self.group, self.dir, free_port())
        (self.dir / "command.txt").write_text(" ".join(command) + "\n")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **loopback_interfaces()}
        env.setdefault("OMP_NUM_THREADS", "1")
        started = time.time()
        with (self.dir / "torchrun.log").open("wb") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True, preexec_fn=die_with_parent)
            try:
                while proc.poll() is None:
                    self._gather()
                    if self._check_timeouts(started):
                        kill_tree(proc)
                        break
                    time.sleep(POLL_S)
            finally:
                if proc.poll() is None:
                    kill_tree(proc)
        self.returncode = proc.returncode
        self._gather()

    def _gather(self) -> None:
        for tail in self.tails.values():
            for line in tail.read_new():
                per_rank = self.lines.setdefault(line["case"], {})
                per_rank[int(line["rank"])] = line
                if self.complete(line["case"]):
                    self.on_event("case_done", {"case": line["case"]})

    def _check_timeouts(self, started: float) -> bool:
        beats = read_heartbeats(self.dir, self.group.world_size)
        now = time.time()
        if not beats and now - started > LAUNCH_TIMEOUT_S:
            self.timed_out = (LAUNCH, beats)
            return True
        for rank, beat in beats.items():
            name, stage = beat["case"], beat["stage"]
            if self.last_stage.get(rank) != (name, stage):
                self.last_stage[rank] = (name, stage)
                self.on_event("stage", {"case": name, "stage": stage, "rank": rank})
            if stage == "finished" or rank in self.lines.get(name, {}):
                continue
            if now - float(beat["case_started"]) > self.limit_for(name):
                self.timed_out = (name, beats)
                return True
        return False

    def unfinished(self) -> list[Case]:
        return [c for c in self.cases if not self.complete(c.id)]

    def blame(self) -> dict[str, list[dict[str, Any]]]:
        """Lines for the cases this launch's timeout or crash took down; the rest are left to rerun."""
        unfinished = self.unfinished()
        if not unfinished:
            return {}
        beats = self.timed_out[1] if self.timed_out else read_heartbeats(self.dir, self.group.world_size)
        culprit = self.timed_out[0] if self.timed_out else self._in_progress(beats, unfinished)
        victims = self._victims(culprit, unfinished)
        return {case.id: [self._line_for(case, rank, beats) for rank in range(self.group.world_size)] for case in victims}

    def _in_progress(self, beats: dict[int, dict[str, Any]], unfinished: list[Case]) -> str | None:
        ids = {c.id for c in unfinished}
        names = [b["case"] for b in beats.values() if b["case"] in ids or b["case"].startswith("<")]
        for case in unfinished:
            if case.id in names:
                return case.id
        return names[0] if names else None

    def _victims(self, culprit: str | None, unfinished: list[Case]) -> list[Case]:
        if culprit is None or culprit == LAUNCH:
            return unfinished  # died before any case started: nothing to gain by relaunching
        probe = setup_probe(culprit)
        if probe:
            return [c for c in unfinished if c.probe == probe]
        return [c for c in unfinished if c.id == culprit] or unfinished

    def _line_for(self, case: Case, rank: int, beats: dict[int, dict[str, Any]]) -> dict[str, Any]:
        existing = self.lines.get(case.id, {}).get(rank)
        if existing is not None:
            return existing
        beat = beats.get(rank, {})
        stage = beat.get("stage") if beat.get("case") in (case.id, setup_name(case.probe), LAUNCH) else "not started"
        if beat.get("case") == setup_name(case.probe):
            stage = f"setup: {beat.get('stage')}"
        tail = log_tail(self.dir / f"rank{rank}.log")
        if self.timed_out:
            reason = f"timed out after {self.limit_for(self.timed_out[0]):g} s on rank {rank} in stage {stage!r}"
            return result_line(case.id, rank, case.world_size, Outcome.TIMEOUT, reason, stage, stderr_tail=tail)
        torchrun_log = (self.dir / "torchrun.log").read_text(errors="replace")
        code = exit_codes(torchrun_log).get(rank, self.returncode)
        sig = signal_name(code)
        how = f"killed by {sig}" if sig else f"exited with code {code}"
        reason = f"rank {rank} {how} in stage {stage!r}"
        if not tail:
            tail = log_tail(self.dir / "torchrun.log")
        return result_line(case.id, rank, case.world_size, Outcome.ERROR, reason, stage, exit_code=code, signal=sig,
                           stderr_tail=tail)


def run_group(group: LaunchGroup, run_dir: Path, *, timeout_override: float | None,
              on_event: EventSink) -> dict[str, list[dict[str, Any]]]:
    """Run every case of a group, relaunching after a timeout or crash; per-rank lines by case id."""
    pending = list(group.cases)
    results: dict[str, list[dict[str, Any]]] = {}
    attempt = 0
    while pending:
        launch_dir = run_dir / f"ws{group.world_size}-{group.device_kind}-{attempt}"
        launch = Launch(group, pending, launch_dir, timeout_override, on_event)
        launch.run()
        for case in pending:
            if launch.complete(case.id):
                results[case.id] = [launch.lines[case.id][r] for r in range(group.world_size)]
        blamed = launch.blame()
        for case_id, lines in blamed.items():
            results[case_id] = lines
            on_event("case_done", {"case": case_id})
        pending = [c for c in pending if c.id not in results]
        attempt += 1
    return results

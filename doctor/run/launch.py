"""Launch: run a group of cases under a real `torchrun`, watch heartbeats, gather per-rank lines.

A case that overruns its timeout gets the launch killed (the whole process tree) and is reported
`timeout` with the stage each rank was in; a rank that dies makes its in-progress case an `error`
with the exit code or signal and the tail of that rank's log. Either way the cases not yet run are
relaunched, so one bad case never costs the others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ds_doctor.cluster.nodes import Cluster
from ds_doctor.files import log_tail
from ds_doctor.forensics import capture, evidence
from ds_doctor.knowledge import catalog
from ds_doctor.probe.rankoptions import DEFAULTS, RankOptions
from ds_doctor.probe.registry import CaseEntry
from ds_doctor.probe.spec import Case
from ds_doctor.procs import die_with_parent, kill_tree, tree_of
from ds_doctor.redact import scrub_text
from ds_doctor.run.attribution import Cause, Ending, attribute, stage_of
from ds_doctor.run.command import rank_environment, torchrun_command
from ds_doctor.run.plan import LaunchGroup, timeout_for
from ds_doctor.rundir import LAUNCH, WAITING_TURN, Beat, Ended, How, LaunchDir, RankLine

LAUNCH_TIMEOUT_S = 180.0  # process start, imports and process-group set-up
POLL_S = 0.2
EXIT_WAIT_S = 30.0  # a launch whose every line is in: its ranks and torchrun exit within this, or are killed
#: the catalog's entry for torchrun's master store failing to bind its port (its patterns hold every wording read)
PORT_TAKEN = "torchrun_port_in_use"


@dataclasses.dataclass(frozen=True)
class LaunchEvents:
    """What a launch tells while it runs: a rank entered a stage; every rank of a case reported (or was blamed)."""

    stage: Callable[[str, int, str], None] = lambda _case, _rank, _stage: None
    case_done: Callable[[Case, list[RankLine]], None] = lambda _case, _lines: None
    #: at every poll of the run's launches: a reporter that says nothing for a while says what still runs
    tick: Callable[[], None] = lambda: None


class LineTail:
    """Reads complete new rank lines of a JSONL file; a truncated last line waits for its end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read_new(self) -> list[RankLine]:
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
            with contextlib.suppress(ValueError):
                lines.append(RankLine.from_json(raw))
        return lines


def exit_codes(torchrun_log: str) -> dict[int, int]:
    """Per-rank exit codes from torchrun's failure summary."""
    codes: dict[int, int] = {}
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

    def __init__(
        self,
        group: LaunchGroup,
        cases: list[Case],
        launch_dir: LaunchDir,
        timeout_override: float | None,
        events: LaunchEvents,
        cluster: Cluster | None = None,
        attempt: int = 0,
        options: RankOptions = DEFAULTS,
    ) -> None:
        self.group = group
        self.options = options
        self.run_cluster = cluster  # the run's nodes: every launch's ranks learn their node from it
        self.cluster = cluster if group.nodes > 1 else None  # set for a launch across the nodes
        self.attempt = attempt
        self.cases = cases
        self.dir = launch_dir
        self.timeout_override = timeout_override
        self.events = events
        self.lines: dict[str, dict[int, RankLine]] = {}
        self.tails = {r: LineTail(launch_dir.rank_lines(r)) for r in range(group.world_size)}
        # set when a heartbeat overran its limit and the launch was killed
        self.timed_out: Ending | None = None
        self.returncode: int | None = None
        self.last_stage: dict[int, tuple[str, str]] = {}
        self.evidence: evidence.Evidence | None = None  # a timed-out launch's stacks and collectives
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.ended = False  # torchrun exited (or was killed) and its lines are gathered
        self.all_in_at: float | None = None  # when an exiting launch was first seen with every line in

    def limit_for(self, name: str) -> float:
        """Seconds a heartbeat name may stay unfinished: the launch's own (across nodes: the join timeout on top),
        a setup's, or a case's."""
        if name == LAUNCH:
            return LAUNCH_TIMEOUT_S + (self.cluster.join_timeout_s if self.cluster else 0.0)
        return timeout_for(name, self.timeout_override)

    def complete(self, case_id: str) -> bool:
        return len(self.lines.get(case_id, {})) == self.group.world_size

    def lines_of(self, case: Case) -> list[RankLine]:
        return [self.lines[case.id][rank] for rank in range(self.group.world_size)]

    def run(self) -> None:
        """Start torchrun and supervise it to its end."""
        self.start()
        try:
            while self.poll():
                time.sleep(POLL_S)
        finally:
            self.stop()

    def start(self, takes_turns: bool = False) -> None:
        """The launch's files, and torchrun started: `poll` supervises it from here. `takes_turns`: it runs beside
        other launches, and its ranks wait for the turn to run the cases that run alone (`ds_doctor.run.groups`)."""
        self.dir.write_cases([c.id for c in self.cases], [CaseEntry.of(c).to_dict() for c in self.cases])
        self.options.write(self.dir.path)
        command = torchrun_command(self.group, self.dir.path, self.cluster, self.attempt, takes_turns)
        # the run directory goes into tickets
        self.dir.command.write_text(scrub_text(" ".join(command)) + "\n")
        env = rank_environment(self.options, self.run_cluster, self.cluster is not None, self.dir.path)
        self.started = time.time()
        with self.dir.torchrun_log.open("wb") as log:  # torchrun holds its own descriptor of it
            self.proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )

    def poll(self) -> bool:
        """One look at the running launch: new lines, stages and limits (an overrun takes the evidence and kills
        it). False once torchrun has ended, and everything it left is gathered."""
        assert self.proc is not None, "poll() before start()"
        if self.ended:
            return False
        if self.proc.poll() is None:
            self._gather()
            beats = self.dir.read_beats()
            self._record_stages(beats)
            self.timed_out = self._overrun(beats)
            if self.timed_out is None:
                return True
            self._take_evidence()
            kill_tree(self.proc)
        self.ended = True
        self.returncode = self.proc.poll()
        self._gather()
        return False

    def running(self) -> bool:
        """Its torchrun has not exited (nor been reaped)."""
        return not self.ended and self.proc is not None and self.proc.poll() is None

    def bound_exit(self, wait_s: float = EXIT_WAIT_S) -> None:
        """A launch whose lines are all in, exiting: killed once it has taken `wait_s` since its last line came (a
        rank stuck in its teardown must not hold the run, nor another launch's turn)."""
        if self.all_in_at is None:
            self.all_in_at = time.time()
        if self.running() and time.time() - self.all_in_at > wait_s:
            self.stop()

    def finish(self, wait_s: float = EXIT_WAIT_S) -> None:
        """A launch whose every line is in, left to exit while the run went on: its exit awaited (at most `wait_s`,
        then its tree killed) and its logs scrubbed."""
        assert self.proc is not None, "finish() before start()"
        left = wait_s - (time.time() - self.all_in_at) if self.all_in_at is not None else wait_s
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=max(left, 0.0))
        self.stop()
        self.ended, self.returncode = True, self.proc.poll()
        self.dir.scrub_logs()

    def stop(self) -> None:
        """Its process tree killed if it still runs (the supervisor itself is going: an exception, Ctrl-C)."""
        if self.proc is not None and self.proc.poll() is None:
            kill_tree(self.proc)

    def waiting_turn(self) -> bool:
        """Every rank of the launch is waiting for its turn to run alone, as their beats said at the last `poll`."""
        return len(self.last_stage) == self.group.world_size and all(
            where == (LAUNCH, WAITING_TURN) for where in self.last_stage.values()
        )

    def give_turn(self) -> None:
        """The ranks may run the cases that run alone (every other running launch waits for its own turn)."""
        self.dir.alone_turn.touch()

    def _gather(self) -> None:
        by_id = {c.id: c for c in self.cases}
        for tail in self.tails.values():
            for line in tail.read_new():
                self.lines.setdefault(line.case, {})[line.rank] = line
                if self.complete(line.case) and line.case in by_id:
                    self.events.case_done(by_id[line.case], self.lines_of(by_id[line.case]))

    def _record_stages(self, beats: dict[int, Beat]) -> None:
        """Each rank's stage as its beat says, told where it changed (and kept: `waiting_turn` reads it)."""
        for rank, beat in beats.items():
            if self.last_stage.get(rank) != (beat.case, beat.stage):
                self.last_stage[rank] = (beat.case, beat.stage)
                self.events.stage(beat.case, rank, beat.stage)

    def _overrun(self, beats: dict[int, Beat]) -> Ending | None:
        """The limit that ran out, with the beats as they were: the launch's own (no rank beat in time) or the case
        a rank has been in too long; None while every one holds."""
        now = time.time()
        if not beats and now - self.started > self.limit_for(LAUNCH):
            return Ending(LAUNCH, beats)
        for rank, beat in beats.items():
            if beat.stage == "finished" or rank in self.lines.get(beat.case, {}):
                continue
            if beat.case == LAUNCH and beat.stage == WAITING_TURN:
                continue  # the parent gives the turn (ds_doctor.run.groups.Turns): no limit of the rank's runs out
            if now - beat.case_started > self.limit_for(beat.case):
                return Ending(beat.case, beats)
        return None

    def _take_evidence(self) -> None:
        """Before the kill: every local rank's stacks and collective record, then what they say."""
        assert self.proc is not None, "evidence before start()"
        # a beat names a pid; only one of the processes this launch started is signalled or attached to
        started = tree_of(self.proc.pid)
        pids = {rank: beat.pid for rank, beat in self.dir.read_beats().items() if beat.pid in started}
        took = capture.take(self.dir, pids) if pids else None
        self.evidence = evidence.read(self.dir, sorted(pids), took)

    def lost_its_port(self) -> bool:
        """Inside one node, torchrun could not bind the master port it was given, and no rank started: between
        `free_port` closing it and torchrun's bind another process took it (a launch beside this one, another job
        on a busy node). Nothing of the cases ran; a new port is all it needs."""
        if self.cluster is not None or self.timed_out is not None or self.lines or self.dir.read_beats():
            return False
        return catalog.get(PORT_TAKEN).matches(log_tail(self.dir.torchrun_log, 200))

    def unfinished(self) -> list[Case]:
        return [c for c in self.cases if not self.complete(c.id)]

    def ending(self) -> Ending:
        """How the launch ended: the timeout it was killed for, or the process's own exit with the last beats."""
        return self.timed_out or Ending(None, self.dir.read_beats())

    def blame(self) -> dict[str, list[RankLine]]:
        """Lines for the cases this launch's timeout or crash took down (`ds_doctor.run.attribution` decides which, and
        why); the rest are left to rerun."""
        unfinished = self.unfinished()
        if not unfinished:
            return {}
        ending = self.ending()
        blamed, causes = attribute(unfinished, self.lines, ending, self.cluster is not None)
        by_id = {case.id: case for case in unfinished}
        return {
            case_id: [self._line(why, by_id[case_id], rank, blamed, ending) for rank, why in ranks.items()]
            for case_id, ranks in causes.items()
        }

    def _line(self, why: Cause, case: Case, rank: int, blamed: str | None, ending: Ending) -> RankLine:
        """The line a cause gives: the rank's own, or what this launch saw of it, with the evidence it holds (logs,
        exit codes, stacks), for the judge (`ds_doctor.run.judge`) to make an outcome of."""
        if why is Cause.FINISHED:
            return self.lines[case.id][rank]
        if why is Cause.NOT_RUN:
            return RankLine.lost(
                case.id, rank, case.world_size, Ended(How.NEVER_RUN, said=blamed), "not started"
            )
        if why is Cause.NEVER_GATHERED:
            return self._never_gathered(case, rank)
        if why is Cause.REMOTE:
            return self._remote_line(case, rank)
        stage = stage_of(case, ending.beats.get(rank))
        tail = log_tail(self.dir.rank_log(rank))
        if why is Cause.TIMED_OUT:
            return self._timed_out_line(case, rank, stage, tail)
        code = exit_codes(self.dir.torchrun_log.read_text(errors="replace")).get(rank, self.returncode)
        return RankLine.lost(
            case.id,
            rank,
            case.world_size,
            Ended(How.DIED),
            stage,
            exit_code=code,
            signal=signal_name(code),
            stderr_tail=tail or log_tail(self.dir.torchrun_log),
        )

    def _timed_out_line(self, case: Case, rank: int, stage: str, tail: str) -> RankLine:
        """A rank of the hung case: where it was, and what the evidence taken before the kill says."""
        overran = self.timed_out.timed_out if self.timed_out else None
        limit = self.limit_for(overran or case.id)
        found = self.evidence or evidence.Evidence()
        # what is about no rank in particular (the evidence's summary, its general findings) goes on the first line
        # built here: a rank that finished the case has its own line already, and would take it nowhere
        finished, beats = self.lines.get(case.id, {}), self.timed_out.beats if self.timed_out else {}
        first = min(
            (r for r in range(case.world_size) if r not in finished and (self.cluster is None or r in beats)),
            default=rank,
        )
        said = found.findings[0].message if found.findings else None
        return RankLine.lost(
            case.id,
            rank,
            case.world_size,
            Ended(How.TIMED_OUT, said=said, limit_s=limit),
            stage,
            duration_s=limit,
            stderr_tail=tail,
            findings=tuple(found.findings_of(rank, first)),
            stacks=found.stacks.get(rank, ()),
            collectives=found.positions.get(rank, ()),
            native_stack=found.native.get(rank),
            notes={"forensics": found.summary()} if rank == first and self.evidence else {},
        )

    def _never_gathered(self, case: Case, rank: int) -> RankLine:
        """No rank of this node ever started: torchrun's rendezvous did not gather every node in time."""
        assert self.cluster is not None
        said = (
            f"torchrun's rendezvous at {self.cluster.endpoint} did not gather all {self.group.nodes} nodes within "
            f"--join-timeout {self.cluster.join_timeout_s:g} s (a node stopped, or is still busy with its own cases)"
        )
        return RankLine.lost(
            case.id,
            rank,
            case.world_size,
            Ended(How.NEVER_GATHERED, said=said),
            "rendezvous",
            exit_code=self.returncode,
            stderr_tail=log_tail(self.dir.torchrun_log),
        )

    def _remote_line(self, case: Case, rank: int) -> RankLine:
        """A rank on another node that never reported this case: name its node and the last case it finished."""
        where = self.dir.read_ranks().get(rank)
        node = (
            f"node {where['node']} ({where['host']})" if where else "another node (it never reported where)"
        )
        finished = [c.id for c in self.cases if rank in self.lines.get(c.id, {})]
        seen = f"; it last finished {finished[-1]}" if finished else "; it finished no case of this launch"
        said = (
            f"rank {rank} on {node} stopped answering during this launch and never reported {case.id}{seen}"
        )
        # in a launch killed for a timeout, it is a timeout's: the limit that ran out
        limit = self.limit_for(self.timed_out.timed_out or case.id) if self.timed_out else None
        return RankLine.lost(
            case.id,
            rank,
            case.world_size,
            Ended(How.UNANSWERED, said=said, limit_s=limit),
            "not seen on this node",
            node=where["node"] if where else None,
        )

"""The run directory and what travels through it: the one place that knows its file names, the rank line a
worker writes per case (`RankLine`, to and from JSON as pytest's `TestReport._to_json/_from_json`), the
heartbeat, and the manifest (`run.json`) from which `ds-doctor report RUN_DIR` rebuilds a killed run.

    run-<host>-<time>-<pid>/
      run.json                          the manifest: plan, environment, options
      stopped.json                      the signal that stopped the run, where one did
      ws<N>-<device>-<attempt>/         one torchrun launch
        cases.json command.txt torchrun.log
        rank<R>.log rank<R>.jsonl heartbeat-rank<R>.json
        blamed.jsonl                    the parent's lines for the cases a timeout or crash took down
        scratch/<case>/                 files a case writes (checkpoints)

Nothing in it is writable by anyone but its owner, whatever the umask (`RunDir.create`): ds-doctor, often root,
acts on what its ranks write there (it signals the process a heartbeat names), so a group member of a shared
project folder must not be able to write it. Heartbeats are read back only from files its own user wrote that
nobody else can write (`read_own`), and the pid in one is checked against the processes the launch started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import enum
import errno
import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ds_doctor.files import CannotWrite, entries_below, replacing, safe_component, write_atomic
from ds_doctor.redact import scrub, scrub_text
from ds_doctor.reports.hang import (
    CollectivePosition,
    StageTime,
    ThreadStack,
    positions_from,
    stacks_from,
    stages_from,
)
from ds_doctor.reports.model import ErrorInfo, Finding, Outcome, TensorRecord

MANIFEST_VERSION = 1

#: The heartbeat name outside any case: start-up (process group) and shutdown.
LAUNCH = "<launch>"
#: the stage of `LAUNCH` a rank beats while it waits for its turn to run the cases that run alone: the parent gives
#: the turn, so no limit runs out on it
WAITING_TURN = "waiting for its turn to run alone"


def setup_name(probe: str) -> str:
    """The heartbeat name of a probe's one-off setup (it runs outside any case)."""
    return f"<setup {probe}>"


def setup_probe(name: str) -> str | None:
    """The probe whose setup a heartbeat name stands for, or None."""
    match = re.match(r"<setup (\w+)>$", name)
    return match.group(1) if match else None


class How(str, enum.Enum):
    """How a case ended on a rank: the first five as the rank saw it, the rest as the parent saw a rank that wrote no
    line (`RankLine.lost`)."""

    RETURNED = "returned"
    SKIPPED = "skipped"
    RAISED = "raised"
    EXITED = "exited"  # the case's code called sys.exit
    SETUP_FAILED = "setup failed"  # its probe's one-off setup raised: the case never ran
    TIMED_OUT = "timed out"  # the case overran its limit and the launch was killed
    DIED = "died"  # the rank's process ended in the case (a signal, an exit code)
    NEVER_GATHERED = "never gathered"  # across nodes: the rendezvous never gathered every node
    UNANSWERED = "unanswered"  # across nodes: a rank of another node stopped answering
    NEVER_RUN = "never run"  # across nodes: a case after the one the launch ended in (never rerun)


#: the ways a rank ends a case without writing its line: the parent says them
LOST = frozenset({How.TIMED_OUT, How.DIED, How.NEVER_GATHERED, How.UNANSWERED, How.NEVER_RUN})


@dataclasses.dataclass(frozen=True)
class Ended:
    """How a case ended on a rank, a fact for the parent's judge (`ds_doctor.run.judge`), never an outcome."""

    how: How
    #: what came with it, in words: a skip's reason, sys.exit's argument, a hang's evidence, the parent's account
    #: of a rank it lost across nodes
    said: str | None = None
    limit_s: float | None = None  # the limit that ran out, where one did

    def to_dict(self) -> dict[str, Any]:
        return {"how": self.how.value, "said": self.said, "limit_s": self.limit_s}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ended:
        said, limit = data.get("said"), data.get("limit_s")
        if not (said is None or isinstance(said, str)) or isinstance(limit, bool):
            raise TypeError("not how a case ended")
        return cls(How(data["how"]), said, None if limit is None else float(limit))


@dataclasses.dataclass(frozen=True)
class RankLine:
    """One rank's result for one case: what a worker writes and the parent merges. A line carries facts (`ended`,
    the findings, what showed, the issue named) that the parent's judge turns into the outcome; one written before
    the facts (an older ds-doctor's) carries the `outcome` and `reason` its rank gave it, and keeps them."""

    case: str
    rank: int
    world_size: int
    outcome: Outcome | None = None  # a line written before `ended`: its rank's outcome
    reason: str | None = None  # ...and its reason
    stage: str | None = None
    duration_s: float = 0.0
    device: str | None = None
    findings: tuple[Finding, ...] = ()
    device_map: tuple[TensorRecord, ...] = ()
    notes: dict[str, Any] = dataclasses.field(default_factory=dict)
    measures: dict[str, float | None] = dataclasses.field(default_factory=dict)
    series: tuple[dict[str, float], ...] = ()
    shown: tuple[str, ...] = ()  # what a reproduce case saw go wrong for real
    shown_notes: tuple[
        str, ...
    ] = ()  # the note keys the probe asked a reader to see (`ctx.note(..., shown=True)`)
    known_issue: str | None = None  # the known issue the probe named for the case...
    issue_shown: bool = False  # ...and whether it showed on this rank
    instead: bool = False  # what the invariants caught is another issue than the reproduce case's own
    ended: Ended | None = None  # how the case ended here: None on a line written before the facts
    error: ErrorInfo | None = None
    exit_code: int | None = None
    signal: str | None = None
    stderr_tail: str | None = None
    node: int | None = None  # a multi-node run's node of this rank
    stages: tuple[StageTime, ...] = ()  # the worker's time per stage
    stacks: tuple[ThreadStack, ...] = ()  # the parent's, for a rank of a hung case: its threads...
    collectives: tuple[CollectivePosition, ...] = ()  # ...and where it stood in each process group
    native_stack: str | None = None  # py-spy's dump with native frames, where py-spy is installed

    def __post_init__(self) -> None:
        if self.outcome is None and self.ended is None:
            raise ValueError(
                f"a line of {self.case} on rank {self.rank} says neither how it ended nor its outcome"
            )

    @classmethod
    def lost(
        cls, case: str, rank: int, world_size: int, ended: Ended, stage: str, **evidence: Any
    ) -> RankLine:
        """The parent's line for a rank that wrote none for `case`: how it saw the rank end there (`LOST`), the stage
        it reached, and the evidence it holds (log tails, exit code, signal, stacks); the judge says what it means."""
        if ended.how not in LOST:
            raise ValueError(f"{ended.how.value!r} is said by the rank itself")
        return cls(case, rank, world_size, stage=stage, ended=ended, **evidence)

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data.update(
            outcome=self.outcome.value if self.outcome is not None else None,
            findings=[f.to_dict() for f in self.findings],
            device_map=[r.to_dict() for r in self.device_map],
            ended=self.ended.to_dict() if self.ended is not None else None,
        )
        # the run directory goes into tickets as it is: scrubbed here
        return json.dumps(scrub(data), default=str)

    @classmethod
    def from_json(cls, text: str | bytes) -> RankLine:
        """A line back from JSON; ValueError when it is not one (truncated, or something else)."""
        data = json.loads(text)
        if not isinstance(data, dict) or "case" not in data or "rank" not in data:
            raise ValueError("not a result line")
        try:
            return cls._from_dict(data)
        # a field of another shape (a finding that is a string: AttributeError; a number past a float's range)
        except (KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
            raise ValueError(f"not a result line: {type(exc).__name__}") from None

    @classmethod
    def _from_dict(cls, data: Mapping[str, Any]) -> RankLine:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        issue = data.get("known_issue")
        if isinstance(issue, Mapping):  # written before the line was typed: {"id": ..., "shown": ...}
            values.update(known_issue=issue.get("id"), issue_shown=bool(issue.get("shown")))
        error, outcome, ended = data.get("error"), data.get("outcome"), data.get("ended")
        return cls(
            **{
                **values,
                "outcome": Outcome(outcome) if outcome is not None else None,
                "ended": Ended.from_dict(ended) if ended is not None else None,
                "instead": data.get("instead") is True,
                "rank": int(data["rank"]),
                "findings": tuple(Finding.from_dict(f) for f in data.get("findings") or ()),
                "device_map": tuple(TensorRecord.from_dict(r) for r in data.get("device_map") or ()),
                "series": tuple(data.get("series") or ()),
                "shown": tuple(data.get("shown") or ()),
                "shown_notes": tuple(str(key) for key in data.get("shown_notes") or ()),
                "error": ErrorInfo(**error) if error else None,
                "stages": stages_from(data.get("stages")),
                "stacks": stacks_from(data.get("stacks")),
                "collectives": positions_from(data.get("collectives")),
            }
        )


@dataclasses.dataclass(frozen=True)
class Beat:
    """A rank's heartbeat: the case (or `<launch>`, `<setup P>`) and stage it is in, and since when."""

    rank: int
    case: str
    stage: str
    case_started: float
    time: float
    pid: int | None = None  # the rank's process: the parent signals it for its stacks when its case hangs

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Beat:
        """A beat from its line; TypeError for a line of another shape (a field of another type included)."""
        beat = cls(**json.loads(text))
        numbers = (beat.case_started, beat.time)
        if (
            type(beat.rank) is not int
            or not isinstance(beat.case, str)
            or not isinstance(beat.stage, str)
            or not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers)
            or not (beat.pid is None or (type(beat.pid) is int and beat.pid > 0))
        ):
            raise TypeError(f"not a heartbeat: {text[:80]!r}")
        return beat


@dataclasses.dataclass(frozen=True)
class PlannedCase:
    """A case as the manifest keeps it: enough to merge its lines and judge its known issue without the registry."""

    case: str
    probe: str
    scenario: str
    variant: str
    world_size: int
    level: int
    reproduce: bool
    device_kind: str
    known_issues: tuple[str, ...] = ()
    skip_reason: str | None = None  # set for a case the plan skipped
    nodes: int = 1  # > 1: its ranks span the nodes of a multi-node run
    node: int | None = None  # a multi-node run's case inside one node: which node
    shared_gpu: str | None = None  # its ranks share GPUs, and how (ds_doctor.run.plan.shared_gpu)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "known_issues": list(self.known_issues)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlannedCase:
        return cls(
            case=data["case"],
            probe=data["probe"],
            scenario=data["scenario"],
            variant=data["variant"],
            world_size=int(data["world_size"]),
            level=int(data["level"]),
            reproduce=bool(data["reproduce"]),
            device_kind=data["device_kind"],
            known_issues=tuple(data.get("known_issues", ())),
            skip_reason=data.get("skip_reason", data.get("reason")),
            nodes=int(data.get("nodes", 1)),
            node=data.get("node"),
            shared_gpu=data.get("shared_gpu"),
        )


@dataclasses.dataclass(frozen=True)
class Manifest:
    """`run.json`: written before the first launch, so a killed run can still be reported."""

    started_at: str
    level: int
    argv: tuple[str, ...]
    keyword: str | None
    env: dict[str, Any]
    hardware: dict[str, Any]
    planned: tuple[PlannedCase, ...]
    skips: tuple[PlannedCase, ...]
    stacks: tuple[
        dict[str, Any], ...
    ] = ()  # `run --with`: the report's stacks; each overlay's cases run again

    def to_json(self) -> str:
        return json.dumps(
            scrub(
                {
                    "manifest_version": MANIFEST_VERSION,
                    "started_at": self.started_at,
                    "level": self.level,
                    "argv": list(self.argv),
                    "keyword": self.keyword,
                    "env": self.env,
                    "hardware": self.hardware,
                    "planned": [p.to_dict() for p in self.planned],
                    "skips": [s.to_dict() for s in self.skips],
                    **({"stacks": list(self.stacks)} if self.stacks else {}),
                }
            ),
            indent=1,
            default=str,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Manifest:
        return cls(
            started_at=data["started_at"],
            level=int(data["level"]),
            argv=tuple(data["argv"]),
            keyword=data.get("keyword"),
            env=dict(data["env"]),
            hardware=dict(data["hardware"]),
            planned=tuple(PlannedCase.from_dict(p) for p in data["planned"]),
            skips=tuple(PlannedCase.from_dict(s) for s in data["skips"]),
            stacks=tuple(dict(s) for s in data.get("stacks") or ()),
        )


class LaunchDir:
    """The files of one torchrun launch."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cases = path / "cases.json"
        self.ranks = path / "ranks.json"  # across nodes: each rank's node and host, written by the workers
        self.command = path / "command.txt"
        self.torchrun_log = path / "torchrun.log"
        self.scratch = path / "scratch"
        # a hung case's evidence: the request, each rank's stacks and dump
        self.forensics = path / "forensics"
        self.forensics_request = self.forensics / "request"
        # written by the parent when the launch's ranks may run the cases that run alone (`ds_doctor.run.turns`)
        self.alone_turn = path / "alone-turn"

    def stacks_text(self, rank: int) -> Path:
        """faulthandler's dump of every thread, written from the signal handler itself."""
        return self.forensics / f"stacks-rank{rank}.txt"

    def thread_names(self, rank: int) -> Path:
        return self.forensics / f"threads-rank{rank}.json"

    def flight_dump(self, rank: int) -> Path:
        """The collectives' record of one rank (torch's Flight Recorder format), named as torch's analyzer reads."""
        return self.forensics / "flight" / f"rank_{rank}"

    def forensics_done(self, rank: int) -> Path:
        return self.forensics / f"done-rank{rank}"

    def rank_log(self, rank: int) -> Path:
        return self.path / f"rank{rank}.log"

    def scrub_logs(self) -> None:
        """The launch's logs (torchrun's, each rank's: libraries print configs and errors there) scrubbed in place
        once the launch has ended, as the report is: people tar the run directory up for a ticket."""
        for log in sorted(self.path.glob("*.log")):
            if log.is_file() and not log.is_symlink():  # a FIFO would block, a link is no log of ours
                scrub_file(log)

    def rank_lines(self, rank: int) -> Path:
        return self.path / f"rank{rank}.jsonl"

    @property
    def blamed(self) -> Path:
        """The lines the parent gave the cases a timeout or crash of this launch took down (no rank wrote them): on
        disk, so a report rebuilt from the run directory (a stopped run's, a killed one's) shows them as they were."""
        return self.path / "blamed.jsonl"

    def write_blamed(self, lines: list[RankLine]) -> None:
        if lines:
            with self.blamed.open("a", encoding="utf-8") as handle:
                handle.write("".join(line.to_json() + "\n" for line in lines))

    def heartbeat(self, rank: int) -> Path:
        return self.path / f"heartbeat-rank{rank}.json"

    def write_cases(self, case_ids: list[str], entries: list[dict[str, Any]] | None = None) -> None:
        """The launch's cases by id, and (for the ranks) each as probe, variant, world size and nodes."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.cases.write_text(json.dumps({"cases": case_ids, "entries": entries or []}))

    def read_cases(self) -> list[str]:
        return list(json.loads(self.cases.read_text())["cases"])

    def read_entries(self) -> list[dict[str, Any]]:
        """What each case is, as the parent wrote it: the ranks run these, in order."""
        return list(json.loads(self.cases.read_text()).get("entries", []))

    def read_beats(self) -> dict[int, Beat]:
        """The heartbeats of this node's ranks (across nodes, the other nodes' ranks beat on their own disks): only
        those this user wrote and nobody else can write (`read_own`); a beat of another shape is left out."""
        beats = {}
        for path in self.path.glob("heartbeat-rank*.json"):
            text = read_own(path)
            if text is None:
                continue
            try:
                beat = Beat.from_json(text)
            except (ValueError, TypeError):
                continue
            beats[beat.rank] = beat
        return beats

    def read_ranks(self) -> dict[int, dict[str, Any]]:
        """Across nodes: rank -> {"node", "host"}; empty when the workers never got that far."""
        try:
            return {int(rank): where for rank, where in json.loads(self.ranks.read_text()).items()}
        except (FileNotFoundError, ValueError):
            return {}


class RunDir:
    """One run's directory: its manifest and its launches."""

    MANIFEST = "run.json"
    STOPPED = "stopped.json"

    def __init__(self, path: Path, nested: bool = False) -> None:
        self.path = path
        self.manifest = path / self.MANIFEST
        self.nested = (
            nested  # an overlay's folder inside a run directory (`stack`): a link there is not followed
        )

    @classmethod
    def create(cls, out_dir: Path, host: str, started: dt.datetime, pid: int) -> RunDir:
        """The run's new directory, and from now on this process and what it starts (torchrun, the ranks) write
        nothing group- or other-writable (`owner_writes_only`): a run in a group-shared folder (umask 002) is
        still written by its owner alone."""
        owner_writes_only()
        path = out_dir / f"run-{safe_component(host)}-{started.strftime('%Y%m%dT%H%M%SZ')}-{pid}"
        if os.geteuid() == 0 and (shared := swappable_ancestor(out_dir)) is not None:
            raise CannotWrite(
                f"--out {out_dir}: {shared} is writable by others (mode {stat.filemode(os.stat(shared).st_mode)}) "
                "without the sticky bit: another user could swap the run's folder for their own while root writes "
                "in it; as root, name an --out only root can write (or inside a sticky folder such as /tmp)"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        # only its owner reads it: the ranks' logs hold what the libraries print (tokens too) until the run
        # scrubs them at its end. Made with that mode, never chmod-ed after (a chmod by name follows a link that
        # replaced the folder meanwhile)
        os.mkdir(path, 0o700)
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise CannotWrite(f"{path}: replaced by another user's file or link as it was made; run again")
        return cls(path)

    def launch(self, name: str, device_kind: str, attempt: int) -> LaunchDir:
        """`ws2-cpu-0`: the launch of `name` (a LaunchGroup's) on this device kind, its `attempt`th time."""
        return LaunchDir(self.path / f"{name}-{device_kind}-{attempt}")

    def rank_line_files(self) -> list[Path]:
        """The ranks' result files, then the parent's lines for the cases a launch's ending took down; none reached
        through a link inside the run directory (a launch folder linked to another user's folder is not this run's:
        root would read what its owner cannot)."""
        if self.nested and self.path.is_symlink():
            return []
        found = sorted(self.path.glob("ws*/rank*.jsonl")) + sorted(self.path.glob("ws*/blamed.jsonl"))
        return [path for path in found if not path.parent.is_symlink()]

    def launches(self) -> list[LaunchDir]:
        """Every launch of the run, those of each `--with` overlay's too."""
        return [LaunchDir(p) for p in sorted(self.path.glob("ws*")) + sorted(self.path.glob("stack-*/ws*"))]

    def scrub_logs(self) -> None:
        """Every launch's logs scrubbed in place (`LaunchDir.scrub_logs`): a run that stopped before its launches
        ended (a signal, a killed doctor) leaves them as the ranks wrote them."""
        for launch in self.launches():
            if launch.path.is_dir():
                launch.scrub_logs()

    def write_stop(self, signal: str) -> None:
        """The signal that stopped the run, for a report rebuilt from this directory later (`read_stop`)."""
        write_atomic(self.path / self.STOPPED, json.dumps({"signal": signal}))

    def read_stop(self) -> str | None:
        """The signal `write_stop` recorded (a name like `SIGTERM`), or None: none was, or the file is not one."""
        try:  # a run directory is data: a FIFO or a link there is no record of ds-doctor's
            data = json.loads(read_inside(self.path / self.STOPPED, 200))
        except ValueError:
            return None
        signal = data.get("signal") if isinstance(data, dict) else None
        return signal if isinstance(signal, str) and re.fullmatch(r"SIG[A-Z0-9]{1,10}", signal) else None

    def stack(self, name: str) -> RunDir:
        """`run --with`: the launches of the cases on the overlay `name`, in `stack-<name>/` (a name read from a
        manifest is data: it stays inside the run directory)."""
        return RunDir(self.path / f"stack-{safe_component(name)}", nested=True)

    def write_manifest(self, manifest: Manifest) -> None:
        write_atomic(self.manifest, manifest.to_json())

    def last_write(self, started: dt.datetime) -> dt.datetime:
        """When anything in the run directory was last written: a killed run's end; `started` where no file says
        (`files_in`: a folder handed over is data, its times too: one beyond any calendar is not a time)."""
        stamps = (info.st_mtime for _, info in files_in(self.path))
        return max(
            (dt.datetime.fromtimestamp(t, dt.timezone.utc) for t in stamps if 0 <= t < LAST_TIMESTAMP),
            default=started,
        )


#: group and other write: never set on what a run writes
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
#: a heartbeat is a line of JSON: more is not one
BEAT_BYTES = 64 << 10


def swappable_ancestor(folder: Path) -> str | None:
    """The first folder from `folder` up to `/` in which a user other than its owner can rename entries (writable by
    the group or by all, without the sticky bit), or None: there, one could replace the run's folder (or one above
    it) with their own between two writes of ds-doctor's."""
    current = os.path.realpath(folder)
    while True:
        try:
            mode = os.stat(current).st_mode
        except OSError:
            mode = 0  # not made yet: ds-doctor makes it, with the narrowed umask
        if mode & WRITABLE_BY_OTHERS and not mode & stat.S_ISVTX:
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def owner_writes_only() -> None:
    """Add group and other write to this process's umask (inherited by every process it starts): whatever the
    user's umask, nobody but the owner can change what the run writes."""
    os.umask(os.umask(0) | WRITABLE_BY_OTHERS)


def read_own(path: Path, limit: int = BEAT_BYTES) -> str | None:
    """The text of `path` if it is a regular file (not followed through a link) owned by this process's user that
    nobody else can write; None otherwise (absent, another's, group-writable, too long, unreadable). What ds-doctor
    acts on comes only from files only it could have written."""
    try:
        data = read_inside(path, limit, own=True)
    except ValueError:
        return None
    return data.decode("utf-8", errors="replace")


#: A file inside a run directory read back as data (a rank's lines): at most this much
MAX_INSIDE_BYTES = 64 << 20
#: A run directory walked for its files (`files_in`): at most this many entries, this many folders deep (a run
#: writes four levels, a checkpoint in a case's scratch a few more)
MAX_WALKED = 100_000
MAX_WALK_DEPTH = 32
#: 9999-12-31T23:59:59Z: a file time past it (tmpfs keeps any) is no time a datetime holds
LAST_TIMESTAMP = 253402300800


def read_inside(path: Path, limit: int = MAX_INSIDE_BYTES, *, own: bool = False) -> bytes:
    """A file inside a run directory, which may be another user's (`report RUN_DIR` of a folder handed over): a
    regular file, opened without following a link or waiting on a FIFO, at most `limit` bytes; with `own`, also one
    this process's user owns and nobody else can write; else ValueError saying why (a link to /dev/zero or to a
    file only root can read, a FIFO, a folder at that name)."""
    flags = (
        os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    )
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        why = (
            "a link: files in a run directory are read, never followed" if exc.errno == errno.ELOOP else None
        )
        raise ValueError(why or exc.strerror or str(exc)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if own and (info.st_uid != os.geteuid() or info.st_mode & WRITABLE_BY_OTHERS):
            raise ValueError("not this user's alone")
        with open(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(f"more than the {limit >> 20} MiB a run directory's file may have")
    return data


def files_in(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """The regular files below `root` with their own stat (links neither followed nor counted), at most MAX_WALKED
    entries and MAX_WALK_DEPTH folders deep (`entries_below`): a folder of a million files or a thousand levels
    (handed over as a run directory) costs a bounded walk, never a RecursionError."""
    for seen, entry in enumerate(entries_below(root, MAX_WALK_DEPTH), start=1):
        if seen > MAX_WALKED:
            return
        if entry.is_file(follow_symlinks=False):
            with contextlib.suppress(OSError):
                yield Path(entry.path), entry.stat(follow_symlinks=False)


def read_rank_lines(path: Path, warnings: list[str]) -> Iterator[RankLine]:
    """Every complete line of a rank's result file; a truncated or broken one is skipped with a warning, and so is
    a file that is not one to read (`read_inside`)."""
    try:
        data = read_inside(path)
    except ValueError as exc:
        warnings.append(f"{path}: {exc}; skipped")
        return
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield RankLine.from_json(raw)
        except ValueError:
            warnings.append(f"{path}: line {number} is truncated or not a result line; skipped")


#: A log past this is scrubbed line by line (a key block split over lines is then masked only where its lines are)
WHOLE_SCRUB_BYTES = 64 << 20


def scrub_file(path: Path) -> None:
    """Rewrite a text file with its secrets masked (atomically; untouched when nothing changes)."""
    try:
        if path.stat().st_size <= WHOLE_SCRUB_BYTES:
            text = path.read_text(encoding="utf-8", errors="replace")
            clean = scrub_text(text)
            if clean != text:
                write_atomic(path, clean, fsync=False)
            return
        with path.open(encoding="utf-8", errors="replace") as source, replacing(path, fsync=False) as sink:
            for line in source:
                sink.write(scrub_text(line))
    except OSError:
        return

"""The NCCL watchdog's timeout lines in a user's multi-rank log, lined up: which ranks timed out in which
collective, and which ranks never reported one.

The line (ProcessGroupNCCL's WorkNCCL printout, unchanged in form from torch 1.x to 2.x, NumelIn/NumelOut since
2.2): `[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523,
NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.` and, with it since 2.3, the
group line `[PG ID 0 PG GUID 0(default_pg) Rank 3] Exception (either an error or timeout) detected by watchdog at
work: 808, last enqueued NCCL work: 811, last completed NCCL work: 807.` From torch 2.14 the timeout line carries its
own group, `[PG GUID 0(default_pg) Rank 3] Watchdog caught ...` (pytorch#191440): before, its `[Rank N]` was cached
from the first work of the process, a rank of whichever group ran first (pytorch#191305). A rank is therefore read
from the `[rankN]:` torch puts before every line of rank N (the global rank) where the line has one, else from the
line's own `Rank N`.

Every rank waiting in a collective that cannot complete times out in it; a rank that never entered it (stuck in
Python, in I/O, in another branch) has nothing pending, so its watchdog says nothing: the ranks missing from the
timeout lines are the ones to look at.
"""

from __future__ import annotations

import dataclasses
import re

from ds_doctor.checks.hang import collective_mismatch
from ds_doctor.reports.model import Finding, Severity
from ds_doctor.userinput import UserInputError, check_rank, check_world_size

MAX_SILENT_NAMED = 16  # more ranks than this that never timed out are one finding, their ranks in ranges

_TIMEOUT = re.compile(
    r"\[(?:PG GUID (?P<guid>[^\s\]]+) )?Rank (?P<rank>\d+)\] "
    r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), "
    r"OpType=(?P<op>\w+)(?:, NumelIn=(?P<numel_in>-?\d+), NumelOut=(?P<numel_out>-?\d+))?, "
    r"Timeout\(ms\)=(?P<timeout>\d+)\)(?: ran for (?P<ran>\d+) milliseconds)?"
)
_GROUP = re.compile(
    r"\[PG (?:ID )?(?P<pg>\w+)(?: PG GUID (?P<guid>[^\s\]]+))? Rank (?P<rank>\d+)\] "
    r"(?:Exception \(either an error or timeout\) detected by watchdog at work|Timeout at NCCL work): "
    r"(?P<seq>\d+)"
)
_LINE_RANK = re.compile(r"\[rank(\d+)\]:")  # torch's prefix of a rank's log lines: its global rank
LINE_RANK_LOOKBACK = 400  # how far before a timeout line's message its `[rankN]:` prefix is looked for
_RANK_SEEN = re.compile(
    r"\[rank(\d+)\]|\[Rank (\d+)\]|\bRank (\d+)\]|^[ \t]+rank[ \t]+:[ \t]*(\d+)", re.MULTILINE
)


#: a rank's heartbeat monitor saying its own watchdog thread is blocked: that rank cannot report a timeout at all
_STUCK = re.compile(r"watchdog got stuck for \d+ seconds|Heartbeat monitor timed out")

#: torchrun's own lines when the job comes down (it signals the ranks left, then sums up the failures)
_TEARDOWN = re.compile(r"closing signal SIG|ChildFailedError|Root Cause \(first observed failure\)")


@dataclasses.dataclass(frozen=True)
class WatchdogTimeout:
    rank: int
    seq: int
    op: str
    numel_in: int | None
    numel_out: int | None
    timeout_ms: int
    ran_ms: int | None
    group: str | None  # from the group line for the same rank and work, where the log has one


@dataclasses.dataclass(frozen=True)
class WatchdogReport:
    timeouts: tuple[WatchdogTimeout, ...]  # the first one of each rank
    ranks_seen: tuple[int, ...]  # every rank the log mentions
    world_size: int | None  # given, or one more than the highest rank seen
    # the ranks the log mentions after the first timeout line (their own lines, torchrun's summary): the log goes on
    # past the timeouts for them, so a silence there is theirs and not the excerpt's end
    seen_after: tuple[int, ...] = ()
    # the ranks whose own watchdog the log says was stuck: their silence says nothing of the collective
    stuck: tuple[int, ...] = ()

    @property
    def silent(self) -> tuple[int, ...]:
        timed_out = {t.rank for t in self.timeouts}
        everyone = range(self.world_size) if self.world_size else self.ranks_seen
        return tuple(r for r in everyone if r not in timed_out)


def _number(digits: str) -> int:
    """A number from the log (`int` refuses more than 4300 digits, and a rank is checked before it sizes anything)."""
    if len(digits) > 20:
        raise UserInputError(
            f"a watchdog line of the log holds a number of {len(digits):,} digits: not a log to line up"
        )
    return int(digits)


def _rank(digits: str) -> int:
    return check_rank(_number(digits), "the log names rank")


def read_watchdog(
    text: str, world_size: int | None = None, written: str | None = None
) -> WatchdogReport | None:
    """None when the log has no watchdog timeout line. A rank or world size beyond MAX_RANKS is a UserInputError.
    `written`: the log in the order it was written, where `text` is reordered (normalised): what `heard_after`
    reads."""
    if world_size is not None:
        check_world_size(world_size, "--world-size")
    groups = {(_rank(m["rank"]), _number(m["seq"])): (m["guid"] or m["pg"]) for m in _GROUP.finditer(text)}
    first: dict[int, WatchdogTimeout] = {}
    for m in _TIMEOUT.finditer(text):
        local, seq = _rank(m["rank"]), _number(m["seq"])
        line_start = max(text.rfind("\n", 0, m.start()) + 1, m.start() - LINE_RANK_LOOKBACK)
        prefixes = _LINE_RANK.findall(text, line_start, m.start())
        rank = _rank(prefixes[-1]) if prefixes else local
        numel_in, numel_out = m["numel_in"], m["numel_out"]
        group = m["guid"] or groups.get((local, seq))
        first.setdefault(
            rank,
            WatchdogTimeout(
                rank,
                seq,
                m["op"],
                _number(numel_in) if numel_in else None,
                _number(numel_out) if numel_out else None,
                _number(m["timeout"]),
                _number(m["ran"]) if m["ran"] else None,
                group,
            ),
        )
    if not first:
        return None
    seen = {_rank(next(g for g in m.groups() if g is not None)) for m in _RANK_SEEN.finditer(text)} | set(
        first
    )
    size = world_size or max(seen) + 1
    report = WatchdogReport(tuple(first[r] for r in sorted(first)), tuple(sorted(seen)), size)
    return dataclasses.replace(
        report, seen_after=heard_after(text if written is None else written, report), stuck=stuck_ranks(text)
    )


def stuck_ranks(text: str) -> tuple[int, ...]:
    """The ranks with a line of their own (`[rankN]:`, or `Rank N]` inside it) saying their watchdog got stuck."""
    stuck = set()
    for m in _STUCK.finditer(text):
        line_start = max(text.rfind("\n", 0, m.start()) + 1, m.start() - LINE_RANK_LOOKBACK)
        named = _RANK_SEEN.findall(text, line_start, m.start())
        if named:
            stuck.add(_rank(next(g for g in named[-1] if g)))
    return tuple(sorted(stuck))


def heard_after(text: str, report: WatchdogReport) -> tuple[int, ...]:
    """The ranks without a timeout line that `text` (as written: normalising reorders lines) mentions after its
    first timeout line, or all of them where torchrun's teardown follows it (the log reaches the job's end)."""
    first = _TIMEOUT.search(text)
    if first is None:
        return ()
    after = {
        _rank(next(g for g in m.groups() if g is not None)) for m in _RANK_SEEN.finditer(text, first.start())
    }
    if _TEARDOWN.search(text, first.start()):
        after |= set(range(report.world_size or 0)) | set(report.ranks_seen)
    return tuple(sorted(after - {t.rank for t in report.timeouts}))


def _ranges(ranks: tuple[int, ...]) -> str:
    """0, 2-5, 9: ranks in ranges (a world of a million ranks is one line)."""
    parts: list[list[int]] = []
    for rank in ranks:
        if parts and rank == parts[-1][1] + 1:
            parts[-1][1] = rank
        else:
            parts.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}-{b}" for a, b in parts)


def _what(t: WatchdogTimeout) -> str:
    numel = f", NumelIn={t.numel_in}, NumelOut={t.numel_out}" if t.numel_in is not None else ""
    return f"{t.op} (SeqNum={t.seq}{numel})"


def _behind(timeouts: list[WatchdogTimeout]) -> list[Finding]:
    """Ranks of one group that timed out at an earlier work than others of it."""
    findings = []
    lowest = min(t.seq for t in timeouts)
    ahead = sorted({t.seq for t in timeouts} - {lowest})
    # behind only where another rank is at a later work: one seq under two group names (a log cut before one
    # rank's group line) is no rank behind
    behind = [t for t in timeouts if t.seq == lowest] if ahead else []
    shown = f"#{', #'.join(map(str, ahead[:10]))}" + (
        f" and {len(ahead) - 10:,} more" if len(ahead) > 10 else ""
    )
    if len(behind) > MAX_SILENT_NAMED:
        findings.append(
            Finding(
                "behind_rank",
                Severity.WARNING,
                f"{len(behind):,} ranks ({_ranges(tuple(t.rank for t in behind))[:300]}) timed out in "
                f"{_what(behind[0])} while others were already at work {shown}: they are behind",
                stage="watchdog",
            )
        )
        behind = []
    for t in behind:
        findings.append(
            Finding(
                "behind_rank",
                Severity.WARNING,
                f"rank {t.rank} timed out in {_what(t)} while others were already at work "
                f"{shown}: it is behind (or the ranks run different groups)",
                rank=t.rank,
                stage="watchdog",
            )
        )
    return findings


def watchdog_findings(report: WatchdogReport) -> list[Finding]:
    findings = []
    by_seq: dict[tuple[str | None, int], list[WatchdogTimeout]] = {}
    for t in report.timeouts:
        by_seq.setdefault((t.group, t.seq), []).append(t)
    for (group, seq), timeouts in sorted(by_seq.items(), key=lambda item: item[0][1]):
        kinds = {(t.op, t.numel_in, t.numel_out) for t in timeouts}
        if len(kinds) > 1:
            sides = {t.rank: _what(t) for t in timeouts}
            findings.append(
                collective_mismatch(
                    group or "(the log does not name it)",
                    seq,
                    sides,
                    min(sides),
                    "the ranks' watchdogs report different collectives",
                )
            )
    # work numbers count per group: ranks are compared within the groups the lines name (all of them together where
    # the log names one group or none)
    named = sorted({t.group for t in report.timeouts if t.group is not None})
    for timeouts in (
        [list(report.timeouts)]
        if len(named) <= 1
        else [[t for t in report.timeouts if t.group == g] for g in named]
    ):
        findings += _behind(timeouts)
    if report.silent:
        by_what: dict[str, list[int]] = {}
        for t in report.timeouts:
            by_what.setdefault(_what(t), []).append(t.rank)
        waiting = "; ".join(
            f"rank{'s' if len(r) > 1 else ''} {_ranges(tuple(r))[:200]} in {what}"
            for what, r in list(by_what.items())[:10]
        )
        silent = report.silent
        remedy = (
            "take that rank's stack while it hangs (py-spy dump --pid, or TORCH_NCCL_DUMP_ON_TIMEOUT=1 with "
            "TORCH_FR_BUFFER_SIZE set, then `ds-doctor triage` on the dump directory)"
        )
        if len(silent) > MAX_SILENT_NAMED:
            findings.append(
                Finding(
                    "missing_rank",
                    Severity.ERROR,
                    f"{len(silent):,} ranks ({_ranges(silent)[:300]}) never reported a watchdog timeout "
                    f"while the others "
                    f"timed out ({waiting[:300]}): they never entered that collective",
                    stage="watchdog",
                    expected="every rank of the group in the same collective",
                    remedy=remedy,
                )
            )
            silent = ()
        for rank in silent:
            if rank in report.stuck:
                findings.append(_stuck(rank, waiting, remedy))
            else:
                findings.append(_silent(rank, waiting, rank in report.seen_after, remedy))
    return findings


def _stuck(rank: int, waiting: str, remedy: str) -> Finding:
    """A rank without a timeout line whose own watchdog was stuck: it could not have reported one, entered or not."""
    return Finding(
        "missing_rank",
        Severity.WARNING,
        f"rank {rank} reported no watchdog timeout while the others timed out ({waiting}), but its own watchdog got "
        "stuck (its heartbeat line): it could not report one, so whether it entered that collective is unknown "
        "(a blocked CUDA or NCCL call on that rank is as likely)",
        rank=rank,
        stage="watchdog",
        expected="every rank of the group in the same collective",
        remedy=remedy,
    )


def _silent(rank: int, waiting: str, heard_after: bool, remedy: str) -> Finding:
    """A rank without a timeout line: an error where the log goes on past the others' timeouts for it (its own lines,
    torchrun's summary), else a warning (the excerpt may end before its line: a ticket shows ~2,000 characters)."""
    if heard_after:
        return Finding(
            "missing_rank",
            Severity.ERROR,
            f"rank {rank} never reported a watchdog timeout while the others timed out ({waiting}): it never "
            "entered that collective; its own log or stack shows where it was",
            rank=rank,
            stage="watchdog",
            expected="every rank of the group in the same collective",
            remedy=remedy,
        )
    return Finding(
        "missing_rank",
        Severity.WARNING,
        f"rank {rank} reported no watchdog timeout in this log while the others timed out ({waiting}); the log "
        f"has no line of rank {rank} after the first timeout, so it may be cut short: possibly rank {rank} never "
        "entered that collective (confirm with its full log, or its stack)",
        rank=rank,
        stage="watchdog",
        expected="every rank of the group in the same collective",
        remedy=remedy,
    )

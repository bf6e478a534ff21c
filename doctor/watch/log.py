"""What a watch keeps of its moments, and what they cost the job, at a cost that does not grow with them (issue 46).

Rebuilding the whole report after every moment made each moment cost as much as all the moments before it (300
steps at `every=1`: 3.7 s bare, 74 s watched), and the results grew without bound. So each moment is written
once, where it can never be lost to a rewrite:

- `MomentLog`: one JSON line per moment, `<report stem>.moments.jsonl` beside the report: the moment's case in the
  report's schema, scrubbed once (that line's data only), appended and flushed; never fsynced, never rewritten.
- `Kept`: the moments the report itself carries, bounded: the first ones (how the job started), every one with a
  finding (the first FOUND_FIRST, then the last FOUND_LAST), and the last RECENT_KEPT clean ones of each kind of
  moment. The others are counted and live in the log only; the report says how many and where.
- `Record`: rank 0's log and kept moments, and the report file written from them (at the first moment, a new kind
  of finding, at most every REPORT_INTERVAL_S, at close), under a header built once.
- `Pace`: the watch's own time against the job's, for `every="auto"` and the warning of an `every=N` over budget.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ds_doctor.files import OutputError, fresh_file, output_kind, write_output
from ds_doctor.redact import scrub
from ds_doctor.reports.model import CaseResult, finite_json, format_time

if TYPE_CHECKING:
    from ds_doctor.reports.model import Report

logger = logging.getLogger("ds_doctor")

LOG_SUFFIX = ".moments.jsonl"
#: The first moments of a job (after_prepare, the first steps): always in the report.
FIRST_KEPT = 8
#: Per kind of moment (step, before_save, after_load), the last clean ones in the report.
RECENT_KEPT = 16
#: Moments with a finding: the first FOUND_FIRST and the last FOUND_LAST in the report (a finding that comes back
#: at every step, a replica that drifted and stays apart, would otherwise grow it with the job again).
FOUND_FIRST, FOUND_LAST = 100, 100


def log_path(report: Path) -> Path:
    """`ds-doctor-watch.json` -> `ds-doctor-watch.moments.jsonl`, beside it."""
    return report.with_name(report.stem + LOG_SUFFIX)


def case_data(case: CaseResult) -> dict[str, Any]:
    """A moment's case as the report and the log hold it: scrubbed here, once (the report's `build_report`
    scrubbed every moment again at every write), with no NaN a strict JSON reader refuses."""
    data: dict[str, Any] = finite_json(scrub(case.to_dict()))
    return data


class MomentLog:
    """The JSON Lines log of every moment, opened (truncated: a new watch, a new log, as the report is replaced) at
    the first line. A line is flushed to the OS as it is written, so a job that dies leaves every moment before it;
    it is never fsynced (an fsync per step was most of what the old rewrite cost). The log is a by-product: where it
    cannot be written, one warning and the job goes on without it."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.lines = 0
        self._handle: IO[str] | None = None
        self._failed = path is None

    @property
    def ok(self) -> bool:
        """Whether every moment so far is in the log."""
        return not self._failed

    def append(self, seq: int, data: dict[str, Any]) -> None:
        if self._failed or self.path is None:
            return
        line = json.dumps({"seq": seq, "case": data}, separators=(",", ":"), allow_nan=False)
        try:
            if self._handle is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._handle = fresh_file(self.path)  # a link planted at its name is replaced, not followed
            self._handle.write(line + "\n")
            self._handle.flush()
        except OSError as exc:
            logger.warning("ds-doctor: cannot write the watch's moment log %s: %s", self.path, exc)
            self._failed = True
            self.close()
            return
        self.lines += 1

    def close(self) -> None:
        if self._handle is not None:
            try:
                self._handle.close()
            except OSError:
                pass
            self._handle = None


def read_log(path: Path) -> Iterator[tuple[int, CaseResult]]:
    """(seq, case) of every moment in a watch's log, in order: the report's cases of any moment it left out."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                entry = json.loads(line)
                yield int(entry["seq"]), CaseResult.from_dict(entry["case"])


class Kept:
    """The report's moments, bounded whatever the job's length: each added once (its data already scrubbed), and
    `results` rebuilds only these. Bounded even where the log could not be written (a full disk): the report then
    says how many moments are in neither, rather than growing back into the cost it replaced."""

    def __init__(self) -> None:
        self.moments = 0
        self.found = 0  # moments with a finding
        self._first: list[tuple[int, dict[str, Any]]] = []
        self._found_first: list[tuple[int, dict[str, Any]]] = []
        self._found_last: deque[tuple[int, dict[str, Any]]] = deque(maxlen=FOUND_LAST)
        self._recent: dict[str, deque[tuple[int, dict[str, Any]]]] = {}
        self.clean_left_out = 0
        self.found_left_out = 0

    def add(self, seq: int, moment: str, data: dict[str, Any], *, has_finding: bool) -> None:
        self.moments += 1
        self.found += has_finding
        entry = (seq, data)
        if len(self._first) < FIRST_KEPT:
            self._first.append(entry)
        elif has_finding:
            if len(self._found_first) < FOUND_FIRST:
                self._found_first.append(entry)
            else:
                self.found_left_out += len(self._found_last) == FOUND_LAST
                self._found_last.append(entry)
        else:
            recent = self._recent.setdefault(moment, deque(maxlen=RECENT_KEPT))
            self.clean_left_out += len(recent) == RECENT_KEPT
            recent.append(entry)

    @property
    def left_out(self) -> int:
        return self.clean_left_out + self.found_left_out

    def entries(self) -> list[tuple[int, dict[str, Any]]]:
        """The kept moments in the order they happened."""
        parts = [self._first, self._found_first, self._found_last, *self._recent.values()]
        return sorted((entry for part in parts for entry in part), key=lambda entry: entry[0])

    def results(self) -> list[CaseResult]:
        return [CaseResult.from_dict(data) for _, data in self.entries()]


#: The full report is rewritten on its own at most this often (seconds); at once for a new kind of finding, a
#: moment a failing step ran alone, or an error about to be raised; and at close (or at exit, for a watch never
#: closed). Every moment in between is in the log the moment it happens.
REPORT_INTERVAL_S = 60.0


class Record:
    """Rank 0's record of a watch: each moment scrubbed once, appended to the log and kept (bounded) for the
    report, which `write` makes from the kept moments under a header built once (env and hardware collected and
    scrubbed at the first write). A write costs the same whatever the job's length."""

    def __init__(self, out: Path | None, argv: tuple[str, ...], started: float) -> None:
        self.out = out
        self.kept = Kept()
        self.log: MomentLog | None = None
        self.writes = 0  # reports written
        self.written: Path | None = None  # where the report went, once it has been written
        self.last: Report | None = None  # the report last written
        self.unwritten = 0  # moments since the last write
        self._argv, self._started = argv, started
        self._report: Path | None = None
        self._header: Report | None = None
        self._last: float | None = None  # monotonic time of the last write
        self._failed = False

    def report_path(self) -> Path | None:
        """`out`, or `out/ds-doctor-watch.json` where `out` is a folder; taken once."""
        if self.out is None:
            return None
        if self._report is None:
            self._report = self.out / "ds-doctor-watch.json" if self.out.is_dir() else self.out
        return self._report

    def add(self, moment: str, case: CaseResult, *, has_finding: bool) -> None:
        """The moment's case scrubbed once, appended to the log, kept for the report (bounded)."""
        data = case_data(case)
        if self.log is None:
            report = self.report_path()
            self.log = MomentLog(log_path(report) if report is not None and _is_file(report) else None)
        self.log.append(self.kept.moments, data)
        self.kept.add(self.kept.moments, moment, data, has_finding=has_finding)
        self.unwritten += 1

    def due(self, urgent: bool) -> bool:
        """Whether the report is to be written now: urgent, never written yet, or the interval passed."""
        return urgent or self._last is None or time.monotonic() - self._last >= REPORT_INTERVAL_S

    def left_out(self) -> str | None:
        """`270 clean moment(s) only in ds-doctor-watch.moments.jsonl`, where the report left moments out."""
        kept, log = self.kept, self.log
        if not kept.left_out or log is None or self.out is None:
            return None
        if log.ok:
            where = f"only in {log.path}"
        elif log.path is None:
            where = "in no file (the report goes to a stream: no log beside it)"
        else:
            where = f"not all in {log.path} (the disk refused it after {log.lines} line(s))"
        if kept.found_left_out:
            return f"{kept.clean_left_out} clean moment(s) and {kept.found_left_out} with a finding {where}"
        return f"{kept.clean_left_out} clean moment(s) {where}"

    def counts(self, shown: int) -> dict[str, Any]:
        kept, log = self.kept, self.log
        return {
            "moments": kept.moments,
            "in_report": shown,
            "with_finding": kept.found,
            "clean_only_in_log": kept.clean_left_out,
            "with_finding_only_in_log": kept.found_left_out,
            "log": str(log.path) if log is not None and log.ok else None,
        }

    def write(self, note: Callable[[int], tuple[str, dict[str, Any]]]) -> Path | None:
        """The report now, `note(moments shown)` (a line for a reader, its figures) on its first moment. A report
        that cannot be written is a warning, once: the job goes on without it."""
        from ds_doctor.run.build import utc_now  # the report's builders: imported at the first write

        target = self.report_path()
        if target is None or not self.kept.moments:
            return None
        self._last, self.unwritten = time.monotonic(), 0
        results = self.kept.results()
        text, figures = note(len(results))
        first = results[0]
        # the note alone is scrubbed here: the moments were scrubbed once, when they happened
        notes = scrub({"watch": text, "watch_moments": figures})
        results[0] = dataclasses.replace(
            first, notes={**first.notes, **notes}, shown_notes=(*first.shown_notes, "watch")
        )
        report = dataclasses.replace(
            self._header_report(), finished_at=format_time(utc_now()), results=tuple(results)
        )
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_output(target, report.to_json() + "\n")
        except (OSError, OutputError) as exc:
            if not self._failed:
                logger.warning("ds-doctor: cannot write the watch report %s: %s", target, exc)
            self._failed = True
            return None
        self.writes += 1
        self.written = target
        self.last = report
        return target

    def _header_report(self) -> Report:
        if self._header is None:
            from ds_doctor.hardware.env import collect_environment
            from ds_doctor.run.build import build_report, utc_now

            env, hardware = collect_environment(dcgm=False)  # no diagnostic inside a training job
            self._header = build_report(
                started=dt.datetime.fromtimestamp(self._started, dt.timezone.utc),
                finished=utc_now(),
                level=2,
                argv=self._argv,
                env=env,
                hardware=hardware,
                results=[],
                run_dir=None,
            )
        return self._header

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


def _is_file(path: Path) -> bool:
    """Whether the report goes to a file (a log beside it), not a stream (`/dev/stdout`, a FIFO: no log)."""
    return output_kind(path) == "file"


#: `every="auto"`: the watch's own time is kept under this share of the job's (the default `budget`).
DEFAULT_BUDGET = 0.02
#: `every="auto"`: the nearest and the farthest spacing of step moments it chooses. Never every step: a step
#: without a moment is what a moment's step is measured against (so the replica digest the hooks run beside a
#: moment is counted too); `every=1` is there for every step.
AUTO_MIN_EVERY, AUTO_MAX_EVERY = 2, 100_000
#: Measured step moments before an `every=N` watch judges its share (the first ones carry the job's warm-up).
SHARE_AFTER = 5


class Pace:
    """The watch's own time against the job's: for `every="auto"`, and for the one warning when `every=N` costs more
    than `budget`. Each optimizer step is stamped when the hooks ask `Watch.wants_step` about it. A step moment's
    cost is its own time (perf_counter around it: the checks, the gather, the log) or, where larger, how much
    longer its step took than the steps without a moment (which also holds what the hooks run beside the moment,
    the replica digest). The job's time is the wall time less the watch's.

    Each rank measures its own; the spacing is decided from every rank's measures after the moment's gather, so it is
    the same on every rank (a step moment is a collective: ranks that chose different steps would wait on each
    other). A step moment's cost is known at the next one, so each decision uses the moment before."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.spent = 0.0  # this rank's moments and report writes, seconds
        self.costs = 0.0  # measured step moments' cost, summed (the first step moment's warm-up left out)
        self.job = 0.0  # the job's time over the same windows
        self.windows = 0  # how many step moments `costs` sums
        self.ratio: float | None = None  # a step moment's cost over a step's, smoothed, the ranks' largest
        self._stamp: tuple[int, float] | None = None  # the last optimizer step asked about, when
        self._moment: tuple[int, float] | None = None  # the last step moment: its step, its own time
        self._moment_step_s: float | None = None  # that step's time, stamp to stamp
        self._plain = [0.0, 0.0]  # the steps since without a moment: their time, how many
        self._window: tuple[int, float, float] | None = (
            None  # the last step moment's start: step, time, spent
        )
        self._warm = False  # whether a step moment has been measured before (the first one is warm-up)

    def stamp(self, step: int, now: float) -> None:
        last = self._stamp
        if last is not None and step == last[0] + 1:
            if self._moment is not None and self._moment[0] == last[0]:
                self._moment_step_s = now - last[1]
            else:
                self._plain[0] += now - last[1]
                self._plain[1] += 1
        self._stamp = (step, now)

    def measure(self, step: int, now: float) -> tuple[float | None, float] | None:
        """At a step moment's start, this rank's (cost of the last step moment, the job's time per step since its
        start); None at the first one. The cost is None for the watch's first step moment (its warm-up)."""
        window, moment = self._window, self._moment
        self._window = (step, now, self.spent)
        if window is None or moment is None or step <= window[0]:
            return None
        cost = moment[1]
        if self._moment_step_s is not None and self._plain[1]:
            cost = max(cost, self._moment_step_s - self._plain[0] / self._plain[1])
        watched = self.spent - window[2] - moment[1] + cost
        job = max(now - window[1] - watched, 0.0)
        self._plain, self._moment_step_s = [0.0, 0.0], None
        warm, self._warm = self._warm, True
        if not warm:
            return None, job / (step - window[0])
        self.costs += cost
        self.job += job
        self.windows += 1
        return cost, job / (step - window[0])

    def moment_done(self, step: int, took: float) -> None:
        self._moment = (step, took)

    @property
    def share(self) -> float | None:
        """The step moments' measured cost over the job's time, once SHARE_AFTER of them are measured."""
        return self.costs / self.job if self.windows >= SHARE_AFTER and self.job > 0 else None

    def decide(self, spacing: int, parts: list[Any]) -> int:
        """The next spacing from every rank's measures (the same on every rank): enough steps that a moment's cost
        is `budget` of theirs, growing at most twofold per moment (the first steps, where jobs break, stay watched
        closely while it learns), shrinking at once."""
        ratios = [
            cost / step_s for cost, step_s in (p for p in parts if p) if cost is not None and step_s > 0
        ]
        if ratios:
            ratio = max(ratios)
            self.ratio = ratio if self.ratio is None else (self.ratio + ratio) / 2
        if self.ratio is None:
            return max(spacing, AUTO_MIN_EVERY)
        target = max(AUTO_MIN_EVERY, math.ceil(min(self.ratio / self.budget, AUTO_MAX_EVERY)))
        return min(target, 2 * spacing) if target > spacing else target

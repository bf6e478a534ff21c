"""A watch over one job: runs a moment's checks on every rank, gathers the findings to every rank with one
collective, and on rank 0 logs them (logger `ds_doctor`), appends the moment to its log (one JSON line each) and
writes the report file (the schema of `ds-doctor run`, each moment a case): at the first moment, at once for a new
kind of finding, else at most every REPORT_INTERVAL_S, and at close, so that a moment costs the same at step 10
and at step 1,000,000 (`ds_doctor.watch.log.Record`). With `raise_on="error"` an error finding raises
`DoctorError` on every rank, before whatever the moment guards (a checkpoint save) runs. `every="auto"` spaces the
step moments to keep the watch's own time under `budget` of the job's (`ds_doctor.watch.log.Pace`)."""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import math
import os
import sys
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ds_doctor.knowledge import catalog
from ds_doctor.reports.model import CaseResult, Finding, Outcome, Severity, Verdict
from ds_doctor.watch.log import AUTO_MIN_EVERY, DEFAULT_BUDGET, Pace, Record
from ds_doctor.watch.moments import PRIMARY, Check, describe
from ds_doctor.watch.target import Target, current_rank

logger = logging.getLogger("ds_doctor")

_LEVELS = {Severity.ERROR: logging.ERROR, Severity.WARNING: logging.WARNING, Severity.INFO: logging.INFO}


class DoctorError(RuntimeError):
    """An error finding at a watched moment (with `raise_on="error"`), raised on every rank."""

    def __init__(self, moment: str, findings: list[Finding]) -> None:
        self.moment = moment
        self.findings = findings
        errors = [f for f in findings if f.is_error]
        listed = "; ".join(f"[{f.invariant}, rank {f.rank}] {f.message}" for f in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        super().__init__(f"ds-doctor at {moment}: {len(errors)} error finding(s): {listed}{more}")


def world() -> tuple[Any, int]:
    """(torch.distributed or None, world size): gathering only where a process group is up with several ranks."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None, 1
    if dist.is_available() and dist.is_initialized():
        return dist, dist.get_world_size()
    return None, 1


#: How long a moment waits for every rank to reach it before it checks this rank alone. Plain DDP lets a job
#: call `save_state` (or `load_state`) on the main process only: a gather would wait for ranks that never come
#: until the process group's timeout (30 min), and the job died without its checkpoint.
WAIT_ENV, DEFAULT_WAIT_S, MAX_WAIT_S = "DS_DOCTOR_WATCH_WAIT_S", 10.0, 600.0


def wait_setting(environ: Mapping[str, str]) -> float:
    """`DS_DOCTOR_WATCH_WAIT_S`: seconds in (0, 600]. Inside the user's job a bad value (`10s`, `nan`, `-1`, `inf`)
    is a warning and the default, never an exception at import or a moment that waits forever."""
    text = environ.get(WAIT_ENV)
    if text is None:
        return DEFAULT_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_WAIT_S:  # nan fails every comparison
        logger.warning(
            "ds-doctor: %s=%r is not a number of seconds in (0, %g]: the watch waits %g s",
            WAIT_ENV,
            text[:40],
            MAX_WAIT_S,
            DEFAULT_WAIT_S,
        )
        return DEFAULT_WAIT_S
    return value


PRESENT_WAIT_S = wait_setting(os.environ)


def present(dist: Any, size: int, key: str, wait_s: float = PRESENT_WAIT_S) -> int | None:
    """None when every rank reached the moment `key` within `wait_s`, else how many had. Through the process
    group's store, one atomic decision per moment (compare_set): a rank that comes late reads the decision and
    never enters a gather the others have left. No store (a backend or launcher without one): None, as before."""
    try:
        from torch.distributed import distributed_c10d as c10d

        store = c10d._get_default_store()
    except Exception:
        return None
    arrived = store.add(f"{key}/in", 1)
    deadline = time.monotonic() + wait_s
    while True:
        if arrived >= size:
            decision = store.compare_set(f"{key}/go", "", "all")
        elif time.monotonic() >= deadline:
            decision = store.compare_set(f"{key}/go", "", "alone")
        else:
            time.sleep(0.002)
            arrived = store.add(f"{key}/in", 0)
            continue
        return None if bytes(decision) == b"all" else arrived


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The collector off for a moment's few milliseconds: a moment makes many small tuples, and each generation-2
    pass would walk the whole heap of a big model's job. Back on (if it was on) whatever happens."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: Findings a watch holds in `findings` (all of them are counted, and written): a finding that comes back at every
#: step would otherwise grow it with the job.
FINDINGS_KEPT = 1000


class Watch:
    """Created by `ds_doctor.api.watch` (or `DoctorCallback`); hooks add `undo` callbacks that `close` runs."""

    def __init__(
        self,
        target: Target,
        *,
        out: str | Path | None = "ds-doctor-watch.json",
        every: int | str | None = None,
        raise_on: str | None = None,
        device_maps: bool = False,
        budget: float = DEFAULT_BUDGET,
        table: str | Path | None = None,
    ) -> None:
        self.validate(
            out=out, every=every, raise_on=raise_on, device_maps=device_maps, budget=budget, table=table
        )
        self.target = target
        self.out = Path(out) if out else None
        self.table = Path(table) if table else None
        self.every = every
        self.raise_on = raise_on
        self.device_maps = device_maps
        self.budget = budget
        self.rank = current_rank()
        self.findings: list[Finding] = []  # every rank's, gathered (every rank holds the first FINDINGS_KEPT)
        self.finding_count = 0
        self.error_count = 0
        self.steps = 0  # optimizer steps seen
        self.record = Record(self.out, ("watch", target.kind), time.time())  # rank 0's: the log, the report
        self._undo: list[Callable[[], None]] = []
        self._counts: dict[str, int] = {}
        self._arrivals: dict[str, int] = {}
        # the kinds of finding seen (moment, invariant, severity, rank): a new one has the report written at once
        self._kinds: set[tuple[str, str, str, int | None]] = set()
        self._pace = Pace(budget)
        self._spacing = AUTO_MIN_EVERY  # every="auto": the spacing chosen last
        self._due: int | None = None  # every="auto": the next step with a moment (None: the next step seen)
        self._said_share = False
        self.closed = False
        self.job_error: tuple[str, Any] | None = (
            None  # the job's error through a watched step, its known issue
        )
        ref = weakref.ref(self)

        def at_exit() -> None:
            """A watch never closed (`w = watch(engine)`, and the job ends): its last moments are written."""
            watch = ref()
            if watch is not None and not watch.closed:
                watch.flush()

        self._at_exit = at_exit
        atexit.register(at_exit)

    @staticmethod
    def validate(
        *,
        out: Any,
        every: Any,
        raise_on: Any,
        device_maps: Any,
        budget: Any = DEFAULT_BUDGET,
        table: Any = None,
    ) -> None:
        """The options, checked where the user passes them (a bad one fails at once, not at the first save)."""
        if table is not None:
            from ds_doctor.table.parquet import TableError, require_pyarrow

            if not isinstance(table, (str, Path)) or not str(table):
                raise ValueError(f"table must be a folder (a str or Path) or None, not {table!r}")
            try:
                require_pyarrow()
            except TableError as exc:
                raise ValueError(str(exc)) from None
        if raise_on not in (None, "error"):
            raise ValueError(f"raise_on must be None or 'error', not {raise_on!r}")
        steps = isinstance(every, int) and not isinstance(every, bool) and every >= 1
        if not (every is None or steps or (isinstance(every, str) and every == "auto")):
            raise ValueError(f"every must be a positive number of steps, 'auto' or None, not {every!r}")
        if (
            not isinstance(budget, (int, float))
            or isinstance(budget, bool)
            or not 0 < budget < 1  # nan fails every comparison
        ):
            raise ValueError(
                f"budget must be a share of the job's time in (0, 1), such as 0.02, not {budget!r}"
            )

    @property
    def spacing(self) -> int | None:
        """Steps between step moments: `every`, or what `every="auto"` chose last (None: the first step only)."""
        return self.every if isinstance(self.every, int) or self.every is None else self._spacing

    @property
    def share(self) -> float | None:
        """The step moments' measured cost over the job's time (None until enough of them were measured)."""
        return self._pace.share

    @property
    def moments(self) -> int:
        """Moments rank 0 recorded (every one is in the log; the report holds a bounded set of them)."""
        return self.record.kept.moments

    @property
    def results(self) -> list[CaseResult]:
        """The moments the report holds (bounded: see `ds_doctor.watch.log.Kept`)."""
        return self.record.kept.results()

    @property
    def writes(self) -> int:
        """Reports written so far."""
        return self.record.writes

    # -- hooks register what close() must put back
    def on_close(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def close(self) -> None:
        """Put back every method and hook the watch changed (last first); safe to call twice. Rank 0 writes the
        report with the moments since its last write, and says, in one line on stderr, that the watch was on and
        what it saw: a clean watch is otherwise silent."""
        while self._undo:
            self._undo.pop()()
        if not self.closed:
            atexit.unregister(self._at_exit)
            self.flush()
            self.record.close()
            self._write_table()
            if self.rank == 0:
                sys.stderr.write(self.closing_line() + "\n")
        self.closed = True

    def _write_table(self) -> None:
        """`table=`: rank 0 adds the report's rows to the results table at close (`ds_doctor.table`); a table that
        cannot be written is a warning: the job goes on."""
        report = self.record.last
        if self.table is None or self.rank != 0 or report is None:
            return
        from ds_doctor.run.build import report_basename
        from ds_doctor.table.parquet import TableError, write_table

        try:
            write_table(report, self.table, f"{report_basename(report)}-watch")
        except TableError as exc:
            logger.warning("ds-doctor: %s", exc)

    def flush(self) -> None:
        """The report written if a moment came since it last was."""
        if self.record.unwritten:
            self.write()

    def closing_line(self) -> str:
        """`ds-doctor watch: 3 moment(s) checked, no finding; report: ds-doctor-watch.json`, and where it applies
        the spacing `every="auto"` chose and how many clean moments only the log holds."""
        said = (
            f"{self.finding_count} finding(s), {self.error_count} error(s)"
            if self.finding_count
            else "no finding"
        )
        where = self.record.written or "no report file"
        line = f"ds-doctor watch: {self.moments} moment(s) checked, {said}; report: {where}"
        return "; ".join([line, *self._job_said(), *self._sayings()])

    def _job_said(self) -> list[str]:
        """The job's error and the known issue it matches, where the job raised through a watched step."""
        if self.job_error is None:
            return []
        headline, issue = self.job_error
        if issue is None:
            return [f"the job raised {headline[:200]}"]
        said = "possibly " if issue.verdict == Verdict.POSSIBLY else ""
        return [f"the job raised {headline[:200]}: {said}known issue {issue.id} ({issue.title})"]

    def _sayings(self) -> list[str]:
        """What the closing line and the report add: the spacing chosen, the moments only in the log."""
        said = []
        if self.every == "auto":
            said.append(
                f"step moments every {self._spacing} steps to stay under {self.budget:.0%} of step time "
                "(every='auto')"
            )
        share = self.share
        if share is not None:
            said.append(f"the step moments took {share:.1%} of the job's time")
        left_out = self.record.left_out()
        if left_out:
            said.append(left_out)
        return said

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wants_step(self, step: int) -> bool:
        """The first optimizer step, and every `every` steps if asked; with `every="auto"`, the steps its pace
        chose. The hooks ask once per optimizer step, before it runs: that is the step's timestamp for the pace."""
        self._pace.stamp(step, time.perf_counter())
        if step == 1:
            return True
        if self.every == "auto":
            return self._due is None or step >= self._due
        return isinstance(self.every, int) and step % self.every == 0

    # -- a moment
    def moment(
        self, moment: str, label: str, check: Callable[[], Check], *, collective: bool = True
    ) -> list[Finding]:
        """Run `check` on this rank, gather, report; raise DoctorError on every rank if asked and an error showed.

        `collective=False` (the job is already failing on this rank, and the others may not come): no gather,
        this rank logs its own findings, rank 0 reports its own, and nothing is raised over the job's error."""
        started = time.perf_counter()
        paced = moment == "step" and collective
        measured = self._pace.measure(self.steps, started) if paced else None
        with no_gc():
            result = check()
        took = time.perf_counter() - started
        if collective and (alone := self._absent(moment, label)) is not None:
            collective = False
            result.findings.append(alone)
        gathered = self._gather(result, took, measured) if collective else [self._mine(result, took, None)]
        if not collective:
            for finding in result.findings:
                logger.log(
                    _LEVELS[finding.severity],
                    "ds-doctor %s (rank %d): [%s] %s",
                    label,
                    self.rank,
                    finding.invariant,
                    finding.message,
                )
            self._done(moment, label, result.findings, gathered, result, started=started, urgent=True)
            return result.findings
        if paced and self.every == "auto":
            self._spacing = self._pace.decide(self._spacing, [part.get("pace") for part in gathered])
            self._due = self.steps + self._spacing
        findings = [f for part in gathered for f in part["findings"]]
        self._count(findings)
        raising = self.raise_on == "error" and any(f.is_error for f in findings)
        if self.rank == 0:
            for finding in findings:
                logger.log(
                    _LEVELS[finding.severity],
                    "ds-doctor %s: [%s] %s",
                    label,
                    finding.invariant,
                    finding.message,
                )
        self._done(moment, label, findings, gathered, result, started=started, urgent=raising)
        if raising:
            raise DoctorError(label, findings)
        return findings

    def _count(self, findings: list[Finding]) -> None:
        self.finding_count += len(findings)
        self.error_count += sum(f.is_error for f in findings)
        room = FINDINGS_KEPT - len(self.findings)
        if room > 0:
            self.findings.extend(findings[:room])

    def _done(
        self,
        moment: str,
        label: str,
        findings: list[Finding],
        gathered: list[dict[str, Any]],
        result: Check,
        *,
        started: float,
        urgent: bool,
    ) -> None:
        """Rank 0 logs the moment and keeps it for the report; the report is written if it is due. The moment's own
        time (to here, the report's write apart) goes to the pace."""
        if self.rank == 0:
            case = self._case(moment, label, findings, gathered, result)
            kinds = {(moment, f.invariant, f.severity.value, f.rank) for f in findings}
            urgent = urgent or not kinds <= self._kinds
            self._kinds |= kinds
            self.record.add(moment, case, has_finding=bool(findings))
        took = time.perf_counter() - started
        self._pace.spent += took
        if moment == "step":
            self._pace.moment_done(self.steps, took)
        if self.rank == 0 and self.record.due(urgent):
            self.write()
        if self.every not in (None, "auto") and not self._said_share:
            self._say_share()

    def _say_share(self) -> None:
        share = self._pace.share
        if share is None or share <= self.budget:
            return
        self._said_share = True
        if self.rank == 0:
            logger.warning(
                "ds-doctor: the watch's step moments take %.1f%% of the job's time at every=%s, over its budget of "
                "%g%%: every='auto' would space them to stay under it (the watch goes on at every=%s)",
                share * 100,
                self.every,
                self.budget * 100,
                self.every,
            )

    def _absent(self, moment: str, label: str) -> Finding | None:
        """A warning when not every rank came to this moment in time (the moment then checks this rank alone)."""
        dist, size = world()
        if dist is None or size == 1:
            return None
        count = _nth(self._arrivals, moment, label)
        arrived = present(dist, size, f"ds_doctor/watch/{label}/{count}")
        if arrived is None:
            return None
        return Finding(
            invariant="watch_ranks_present",
            severity=Severity.WARNING,
            rank=self.rank,
            message=(
                f"{label}: {arrived} of {size} ranks reached this moment within {PRESENT_WAIT_S:.0f} s (called on "
                "some ranks only, as plain DDP allows for save_state and load_state): this rank was checked alone "
                "and the job went on"
            ),
        )

    def _gather(self, result: Check, took: float, pace: Any) -> list[dict[str, Any]]:
        """One all_gather_object per moment: findings (with their evidence rows), counts and the pace's measures,
        never tensors."""
        mine = self._mine(result, took, pace)
        dist, size = world()
        if dist is None or size == 1:
            return [mine]
        parts: list[Any] = [None] * size
        dist.all_gather_object(parts, mine)
        return parts

    def _mine(self, result: Check, took: float, pace: Any) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "findings": result.findings,
            "records": result.records,
            "check_s": took,
            "device_map": result.device_map if self.rank == 0 else [],
            "pace": pace,
        }

    def _case(
        self, moment: str, label: str, findings: list[Finding], gathered: list[dict[str, Any]], result: Check
    ) -> CaseResult:
        count = _nth(self._counts, moment, label)
        errors = [f for f in findings if f.is_error]
        issue = _issue_shown(errors, PRIMARY[moment], deepspeed="deepspeed" in self.target.kind)
        about = describe(moment)
        return CaseResult(
            probe="watch",
            case=f"watch[{label}]" + (f"#{count}" if count > 1 else ""),
            scenario=about["scenario"],
            level=2,
            world_size=len(gathered),
            device_kind="cuda" if self.target.device.startswith("cuda") else "cpu",
            outcome=Outcome.FAIL if errors else Outcome.PASS,
            duration_s=round(max(part["check_s"] for part in gathered), 6),
            reason=f"[{errors[0].invariant}] {errors[0].message}" if errors else None,
            known_issue=issue,
            findings=tuple(findings),
            device_map=tuple(gathered[0]["device_map"]),
            notes={
                "moment": moment,
                "checks": about["checks"],
                "target": self.target.kind,
                "step": self.steps,
                "records_per_rank": [part["records"] for part in gathered],
                "check_ms_per_rank": [round(part["check_s"] * 1e3, 3) for part in gathered],
            },
        )

    def job_failed(self, exc: BaseException, label: str) -> None:
        """The job's own error, raised through a watched step: classified by the matcher runs and `triage` use
        (`ds_doctor.knowledge.matching.judged`), kept as an `error` case with its known issue (or "possibly" one,
        saying how to confirm), and the report written now. This rank's error only: the others may never come."""
        if self.rank != 0 or self.closed:
            return
        import traceback

        from ds_doctor.knowledge.matching import issue_ref, judged
        from ds_doctor.reports.model import ErrorInfo, RankSummary

        error = ErrorInfo.of(exc)
        found = judged(["".join(traceback.format_exception(type(exc), exc, exc.__traceback__))])
        issue = issue_ref(found) if found else None
        self.job_error = (error.headline, issue)
        case = CaseResult(
            probe="watch",
            case=f"watch[{label}: the job's error]",
            scenario=describe("step")["scenario"],
            level=2,
            world_size=1,
            device_kind="cuda" if self.target.device.startswith("cuda") else "cpu",
            outcome=Outcome.ERROR,
            duration_s=0.0,
            reason=error.headline,
            known_issue=issue,
            ranks=(
                RankSummary(self.rank, Outcome.ERROR.value, reason=error.headline, traceback=error.traceback),
            ),
            notes={"moment": "step", "target": self.target.kind, "step": self.steps},
        )
        self.record.add("step", case, has_finding=True)
        self.write()

    def write(self) -> Path | None:
        """Rank 0 writes the report now (`Record.write`: bounded whatever the job's length), the watch's note on its
        first moment; its time counts as the watch's."""
        if self.out is None or self.rank != 0:
            return None
        started = time.perf_counter()
        try:
            return self.record.write(self._note)
        finally:
            self._pace.spent += time.perf_counter() - started

    def _note(self, shown: int) -> tuple[str, dict[str, Any]]:
        """The watch's note for a reader: how many moments, how many in this report and where the others are, the
        spacing and the watch's share of the job's time; and its figures."""
        kept = self.record.kept
        text = "; ".join(
            [
                f"{kept.moments} moment(s), {shown} in this report, {kept.found} with a finding",
                *self._sayings(),
            ]
        )
        share = self.share
        figures = {
            **self.record.counts(shown),
            "every": self.every,
            "spacing": self.spacing,
            "budget": self.budget,
            "share": None if share is None else round(share, 5),
        }
        return text, figures


def _nth(table: dict[str, int], moment: str, label: str) -> int:
    """How many times `label` has come, this time included. A step's label names its step, new each time in a watch
    (its steps only go forward): never kept, or the table would grow with the job."""
    if moment == "step" and label not in table:
        return 1
    count = table[label] = table.get(label, 0) + 1
    return count


def _issue_shown(errors: list[Finding], primary: tuple[str, ...], *, deepspeed: bool) -> Any:
    """The known issue of the first broken invariant the moment is there for (else of any broken one), as
    `affected`: it showed in this job. DeepSpeed's issues only where DeepSpeed runs."""
    broken = {f.invariant for f in errors}
    for invariant in [*(i for i in primary if i in broken), *sorted(broken)]:
        for issue in catalog.ISSUES:
            if invariant in issue.invariants and (deepspeed or issue.package != "deepspeed"):
                return issue.to_ref(Verdict.AFFECTED)
    return None

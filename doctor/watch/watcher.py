"""A watch over one job: runs a moment's checks on every rank, gathers the findings to every rank with one
collective, and on rank 0 logs them (logger `ds_doctor`) and rewrites the report file (the schema of
`ds-doctor run`, each moment a case). With `raise_on="error"` an error finding raises `DoctorError` on every
rank, before whatever the moment guards (a checkpoint save) runs."""

from __future__ import annotations

import contextlib
import gc
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ds_doctor.files import OutputError, write_output
from ds_doctor.knowledge import catalog
from ds_doctor.reports.records import CaseResult, Finding, Outcome, Severity, Verdict
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


class Watch:
    """Created by `ds_doctor.api.watch` (or `DoctorCallback`); hooks add `undo` callbacks that `close` runs."""

    def __init__(
        self,
        target: Target,
        *,
        out: str | Path | None = "ds-doctor-watch.json",
        every: int | None = None,
        raise_on: str | None = None,
        device_maps: bool = False,
    ) -> None:
        self.validate(out=out, every=every, raise_on=raise_on, device_maps=device_maps)
        self.target = target
        self.out = Path(out) if out else None
        self.every = every
        self.raise_on = raise_on
        self.device_maps = device_maps
        self.rank = current_rank()
        self.results: list[CaseResult] = []
        self.findings: list[Finding] = []  # every rank's, gathered (every rank holds them all)
        self.steps = 0  # optimizer steps seen
        self._undo: list[Callable[[], None]] = []
        self._counts: dict[str, int] = {}
        self._arrivals: dict[str, int] = {}
        self._write_failed = False
        self._written: Path | None = None  # where the report went, once it has been written
        self._started = time.time()
        self._env: tuple[dict[str, Any], dict[str, Any]] | None = None
        self.closed = False

    @staticmethod
    def validate(*, out: Any, every: Any, raise_on: Any, device_maps: Any) -> None:
        """The options, checked where the user passes them (a bad one fails at once, not at the first save)."""
        if raise_on not in (None, "error"):
            raise ValueError(f"raise_on must be None or 'error', not {raise_on!r}")
        if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
            raise ValueError(f"every must be a positive number of steps or None, not {every!r}")

    # -- hooks register what close() must put back
    def on_close(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def close(self) -> None:
        """Put back every method and hook the watch changed (last first); safe to call twice. Rank 0 says, in one
        line on stderr, that the watch was on and what it saw: a clean watch is otherwise silent."""
        while self._undo:
            self._undo.pop()()
        if not self.closed and self.rank == 0:
            sys.stderr.write(self.closing_line() + "\n")
        self.closed = True

    def closing_line(self) -> str:
        """`ds-doctor watch: 3 moment(s) checked, no finding; report: ds-doctor-watch.json`."""
        errors = sum(f.is_error for f in self.findings)
        said = f"{len(self.findings)} finding(s), {errors} error(s)" if self.findings else "no finding"
        where = self._written or "no report file"
        return f"ds-doctor watch: {len(self.results)} moment(s) checked, {said}; report: {where}"

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wants_step(self, step: int) -> bool:
        """The first optimizer step, and every `every` steps if asked."""
        return step == 1 or (self.every is not None and step % self.every == 0)

    # -- a moment
    def moment(
        self, moment: str, label: str, check: Callable[[], Check], *, collective: bool = True
    ) -> list[Finding]:
        """Run `check` on this rank, gather, report; raise DoctorError on every rank if asked and an error showed.

        `collective=False` (the job is already failing on this rank, and the others may not come): no gather,
        this rank logs its own findings, rank 0 reports its own, and nothing is raised over the job's error."""
        started = time.perf_counter()
        with no_gc():
            result = check()
        took = time.perf_counter() - started
        if collective and (alone := self._absent(label)) is not None:
            collective = False
            result.findings.append(alone)
        gathered = self._gather(result, took) if collective else [self._mine(result, took)]
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
            if self.rank == 0:
                self.results.append(self._case(moment, label, result.findings, gathered, result))
                self.write()
            return result.findings
        findings = [f for part in gathered for f in part["findings"]]
        self.findings.extend(findings)
        if self.rank == 0:
            for finding in findings:
                logger.log(
                    _LEVELS[finding.severity],
                    "ds-doctor %s: [%s] %s",
                    label,
                    finding.invariant,
                    finding.message,
                )
            self.results.append(self._case(moment, label, findings, gathered, result))
            self.write()
        if self.raise_on == "error" and any(f.is_error for f in findings):
            raise DoctorError(label, findings)
        return findings

    def _absent(self, label: str) -> Finding | None:
        """A warning when not every rank came to this moment in time (the moment then checks this rank alone)."""
        dist, size = world()
        if dist is None or size == 1:
            return None
        count = self._arrivals[label] = self._arrivals.get(label, 0) + 1
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

    def _gather(self, result: Check, took: float) -> list[dict[str, Any]]:
        """One all_gather_object per moment: findings (with their evidence rows) and counts, never tensors."""
        mine = self._mine(result, took)
        dist, size = world()
        if dist is None or size == 1:
            return [mine]
        parts: list[Any] = [None] * size
        dist.all_gather_object(parts, mine)
        return parts

    def _mine(self, result: Check, took: float) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "findings": result.findings,
            "records": result.records,
            "check_s": took,
            "device_map": result.device_map if self.rank == 0 else [],
        }

    def _case(
        self, moment: str, label: str, findings: list[Finding], gathered: list[dict[str, Any]], result: Check
    ) -> CaseResult:
        count = self._counts[label] = self._counts.get(label, 0) + 1
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

    def write(self) -> Path | None:
        """Rank 0 rewrites the report after every moment, so a job that dies later still leaves it."""
        if self.out is None or self.rank != 0:
            return None
        from ds_doctor.run.build import build_report, utc_now

        if self._env is None:
            from ds_doctor.hardware.env import collect_environment

            self._env = collect_environment(dcgm=False)  # no diagnostic inside a training job
        env, hardware = self._env
        import datetime as dt

        report = build_report(
            started=dt.datetime.fromtimestamp(self._started, dt.timezone.utc),
            finished=utc_now(),
            level=2,
            argv=("watch", self.target.kind),
            env=env,
            hardware=hardware,
            results=self.results,
            run_dir=None,
        )
        # out=<a folder>: inside it
        target = self.out / "ds-doctor-watch.json" if self.out.is_dir() else self.out
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_output(target, report.to_json() + "\n")
        except (OSError, OutputError) as exc:  # the report is a by-product: the job goes on without it
            if not self._write_failed:
                logger.warning("ds-doctor: cannot write the watch report %s: %s", target, exc)
            self._write_failed = True
            return None
        self._written = target
        return target


def _issue_shown(errors: list[Finding], primary: tuple[str, ...], *, deepspeed: bool) -> Any:
    """The known issue of the first broken invariant the moment is there for (else of any broken one), as
    `affected`: it showed in this job. DeepSpeed's issues only where DeepSpeed runs."""
    broken = {f.invariant for f in errors}
    for invariant in [*(i for i in primary if i in broken), *sorted(broken)]:
        for issue in catalog.ISSUES:
            if invariant in issue.invariants and (deepspeed or issue.package != "deepspeed"):
                return issue.to_ref(Verdict.AFFECTED)
    return None

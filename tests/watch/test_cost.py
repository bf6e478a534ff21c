"""What a watch costs over a job's length (issue 46), asserted by structure, never by time: the report is written a
bounded number of times whatever the steps (at the first moment, at once for a new kind of finding, at most once
per interval, at close), every moment is one line of the log beside it, the report's moments stay bounded and say
where the others are, and `every="auto"` spaces the step moments by what it measured. Real jobs: the tiny LM of
tests/resources/watch_jobs.py through a plain `Accelerator` on the CPU, in this process."""

from __future__ import annotations

import itertools
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ds_doctor.api import DoctorError, watch
from ds_doctor.reports.model import Outcome, Report
from ds_doctor.watch import log
from ds_doctor.watch.log import AUTO_MIN_EVERY, FIRST_KEPT, RECENT_KEPT, Pace, read_log
from ds_doctor.watch.watcher import Watch
from tests.bounds import GENEROUS_RUN_S
from tests.conftest import requires_accelerate

pytestmark = requires_accelerate

ROOT = Path(__file__).resolve().parents[2]


class Job:
    """The tiny LM (frozen embedding, a body, a head) and GroupTensorSGD (a tensor kept in its param group) prepared
    by an Accelerator on the CPU, stepped one optimizer step at a time as a user's loop does."""

    def __init__(self) -> None:
        from accelerate import Accelerator

        from tests.resources.watch_jobs import GroupTensorSGD, tiny_lm

        self.accelerator = Accelerator(cpu=True)
        model = tiny_lm()
        optimizer = GroupTensorSGD([p for p in model.parameters() if p.requires_grad])
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.done = 0

    def step(self) -> None:
        from tests.resources.watch_jobs import ids

        x, y = ids(self.done, 0)
        self.accelerator.backward(self.model(x, labels=y)["loss"])
        self.optimizer.step()
        self.optimizer.zero_grad()
        self.done += 1

    def plant(self) -> torch.Tensor:
        """S4's shape between steps: the group's tensor away from the parameters (on meta, where SGD still steps it)."""
        group = self.optimizer.optimizer.param_groups[0]
        kept = group["running_scale"]
        group["running_scale"] = torch.ones((), device="meta")
        return kept

    def restore(self, kept: torch.Tensor) -> None:
        self.optimizer.optimizer.param_groups[0]["running_scale"] = kept


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every report the watch writes, as written (the report's writer, counted where `Record.write` calls it)."""
    written: list[str] = []
    real = log.write_output

    def counted(path: Path, text: str) -> None:
        written.append(text)
        real(path, text)

    monkeypatch.setattr(log, "write_output", counted)
    yield written


def log_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def report_of(path: Path) -> Report:
    return Report.from_dict(json.loads(path.read_text()))


def test_every_step_writes_the_report_twice_and_logs_each_moment_once(
    tmp_path: Path, writes: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """200 steps at every=1: the report was rewritten after each moment (201 times, each over every moment so far);
    now it is written at the first moment and at close, the log holds 201 lines, and the report's moments are the
    first ones and the last clean ones, with a note of the others and where they are."""
    monkeypatch.setattr(log, "REPORT_INTERVAL_S", 3600.0)  # the interval never falls inside this job
    job = Job()
    w = watch(job.accelerator, out=tmp_path / "w.json", every=1)
    for _ in range(200):
        job.step()
    assert len(writes) == 1  # at the first moment: the header and after_prepare
    w.close()
    assert len(writes) == 2 and w.writes == 2
    lines = log_lines(tmp_path / "w.moments.jsonl")
    assert [line["seq"] for line in lines] == list(range(201))
    assert [line["case"]["case"] for line in lines] == ["watch[after_prepare]"] + [
        f"watch[step {n}]" for n in range(1, 201)
    ]
    assert [case.case for _, case in read_log(tmp_path / "w.moments.jsonl")][-1] == "watch[step 200]"
    report = report_of(tmp_path / "w.json")
    shown = [r.case for r in report.results]
    assert len(shown) == FIRST_KEPT + RECENT_KEPT == len(w.results)  # bounded, whatever the steps
    assert shown[:FIRST_KEPT] == ["watch[after_prepare]"] + [f"watch[step {n}]" for n in range(1, FIRST_KEPT)]
    assert shown[FIRST_KEPT:] == [f"watch[step {n}]" for n in range(201 - RECENT_KEPT, 201)]
    counts = report.results[0].notes["watch_moments"]
    assert counts["moments"] == 201 and counts["in_report"] == len(shown) and counts["with_finding"] == 0
    assert counts["clean_only_in_log"] == 201 - len(shown) and counts["log"] == str(
        tmp_path / "w.moments.jsonl"
    )
    assert "watch" in report.results[0].shown_notes
    closing = capsys.readouterr().err.strip().splitlines()[-1]
    assert closing.startswith(
        f"ds-doctor watch: 201 moment(s) checked, no finding; report: {tmp_path / 'w.json'}"
    )
    assert closing.endswith(f"{201 - len(shown)} clean moment(s) only in {tmp_path / 'w.moments.jsonl'}")


def test_table_adds_the_last_reports_rows_to_the_results_table_at_close(tmp_path: Path) -> None:
    """`watch(table=DIR)`: the report at close as rows of the results table, which `fleet` and DuckDB read."""
    duckdb = pytest.importorskip("duckdb")
    job = Job()
    with watch(job.accelerator, out=tmp_path / "w.json", every=5, table=tmp_path / "table"):
        for _ in range(20):
            job.step()
    (written,) = (tmp_path / "table").rglob("*.parquet")
    assert written.name.endswith("-watch.parquet") and written.parent.name.startswith("node=")
    cases = duckdb.sql(
        f"SELECT \"case\", outcome FROM read_parquet('{written}') WHERE kind = 'case' ORDER BY \"case\""
    ).fetchall()
    report = report_of(tmp_path / "w.json")
    assert sorted((r.case, r.outcome.value) for r in report.results) == cases and len(cases) == 6


def test_a_finding_mid_job_is_written_at_once_and_its_repeats_at_the_interval(
    tmp_path: Path, writes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group tensor moved away at step 50 and put back at step 80: the report holds step 50's failure the moment
    it happens (a job that dies then loses nothing); the same finding at steps 51-79 waits for the interval or
    close; at close the report holds every moment with a finding."""
    monkeypatch.setattr(log, "REPORT_INTERVAL_S", 3600.0)
    job = Job()
    w = watch(job.accelerator, out=tmp_path / "w.json", every=1)
    for _ in range(49):
        job.step()
    assert len(writes) == 1
    kept = job.plant()
    job.step()  # step 50
    assert len(writes) == 2
    cases = {r.case: r for r in report_of(tmp_path / "w.json").results}
    assert cases["watch[step 50]"].outcome == Outcome.FAIL  # on disk before close
    assert "optimizer_state_colocation" in (cases["watch[step 50]"].reason or "")
    for _ in range(29):
        job.step()  # steps 51-79: the same kind of finding
    job.restore(kept)
    for _ in range(41):
        job.step()  # steps 80-120
    assert len(writes) == 2
    w.close()
    assert len(writes) == 3
    report = report_of(tmp_path / "w.json")
    failed = [r.case for r in report.results if r.outcome == Outcome.FAIL]
    assert failed == [f"watch[step {n}]" for n in range(50, 80)]
    counts = report.results[0].notes["watch_moments"]
    assert (
        counts["moments"] == 121 and counts["with_finding"] == 30 and counts["with_finding_only_in_log"] == 0
    )
    assert len(log_lines(tmp_path / "w.moments.jsonl")) == 121
    assert w.finding_count == 30 and w.error_count == 30


def test_the_interval_writes_the_report_between_findings(
    tmp_path: Path, writes: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the interval passed at every moment the report is current before close, as the old rewrite was."""
    monkeypatch.setattr(log, "REPORT_INTERVAL_S", 0.0)
    job = Job()
    w = watch(job.accelerator, out=tmp_path / "w.json", every=1)
    for _ in range(5):
        job.step()
    assert len(writes) == 6
    assert report_of(tmp_path / "w.json").results[-1].case == "watch[step 5]"
    w.close()  # nothing new since: not written again
    assert len(writes) == 6


def test_raise_on_error_writes_the_report_before_it_raises(tmp_path: Path, writes: list[str]) -> None:
    job = Job()
    w = watch(job.accelerator, out=tmp_path / "w.json", every=1, raise_on="error")
    job.step()
    job.plant()
    with pytest.raises(DoctorError, match="step 2"):
        job.step()
    cases = {r.case: r for r in report_of(tmp_path / "w.json").results}  # before close
    assert cases["watch[step 2]"].outcome == Outcome.FAIL
    w.close()


def test_every_auto_spaces_the_steps_of_a_job_whose_steps_take_microseconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tiny LM's steps take well under a millisecond and a moment costs a large share of one: "auto" keeps the
    first steps watched (1, 3, 5), then widens the spacing at most twofold per moment, and says what it chose. Each
    moment is made to take 20 ms more (a sleep inside it, measured as its own time): on a loaded box a step can take
    several milliseconds too, and the moment's share of it must stay large whatever the load (it once measured 1 %
    beside a CPU hog and kept every 2nd step)."""
    from ds_doctor.watch.watcher import Watch

    case = Watch._case

    def slow_case(self: Watch, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.02)
        return case(self, *args, **kwargs)

    monkeypatch.setattr(Watch, "_case", slow_case)
    job = Job()
    w = watch(job.accelerator, out=tmp_path / "w.json", every="auto")
    for _ in range(400):
        job.step()
    w.close()
    steps = [line["case"]["notes"]["step"] for line in log_lines(tmp_path / "w.moments.jsonl")[1:]]
    assert steps[:3] == [1, 3, 5]
    gaps = [b - a for a, b in itertools.pairwise(steps)]
    assert all(b <= 2 * a for a, b in itertools.pairwise(gaps)), gaps  # never more than twofold at once
    assert w.spacing is not None and w.spacing >= 8 and len(steps) < 400 // 4, (w.spacing, steps)
    said = f"step moments every {w.spacing} steps to stay under 2% of step time (every='auto')"
    assert said in capsys.readouterr().err
    notes = report_of(tmp_path / "w.json").results[0].notes
    assert said in notes["watch"] and notes["watch_moments"]["every"] == "auto"
    assert notes["watch_moments"]["spacing"] == w.spacing


def test_the_spacing_is_decided_from_every_ranks_measures() -> None:
    """The largest share of any rank's step, the budget's worth of steps, growing at most twofold, shrinking at once;
    never every step (a step without a moment is what a moment's step is measured against)."""
    pace = Pace(0.02)
    assert pace.decide(2, [None, None]) == AUTO_MIN_EVERY  # no measure yet
    assert pace.decide(2, [(None, 0.01)]) == AUTO_MIN_EVERY  # the first moment's warm-up is no measure
    # rank 1's moment costs a tenth of its step: 5 steps keep it at 2 %; from 2, twofold first
    assert pace.decide(2, [(0.0001, 0.01), (0.001, 0.01)]) == 4
    assert pace.decide(4, [(0.001, 0.01), (0.001, 0.01)]) == 5
    pace.ratio = None
    assert (
        pace.decide(64, [(0.00001, 0.01)]) == AUTO_MIN_EVERY
    )  # a cheap moment: the closest spacing, at once


def test_every_n_is_honoured_and_a_share_over_budget_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job = Job()
    with caplog.at_level(logging.WARNING, logger="ds_doctor"):
        w = watch(job.accelerator, out=tmp_path, every=1, budget=1e-9)
        for _ in range(30):
            job.step()
        w.close()
    said = [r.getMessage() for r in caplog.records if "over its budget" in r.getMessage()]
    assert len(said) == 1 and "at every=1" in said[0], said
    assert w.moments == 31
    # out a folder: the report and its log inside it
    assert (tmp_path / "ds-doctor-watch.json").is_file()
    assert len(log_lines(tmp_path / "ds-doctor-watch.moments.jsonl")) == 31


@pytest.mark.parametrize(
    "options",
    [
        {"every": 0},
        {"every": True},
        {"every": 2.5},
        {"every": "fast"},
        {"every": "auto", "budget": 0},
        {"budget": 1},
        {"budget": -0.1},
        {"budget": float("nan")},
        {"budget": "2%"},
        {"budget": True},
        {"table": 3},
        {"table": ""},
    ],
)
def test_bad_every_or_budget_fails_where_it_is_passed(options: dict[str, Any]) -> None:
    from ds_doctor.api import DoctorCallback

    with pytest.raises(ValueError, match=r"every|budget|table"):
        watch(torch.nn.Linear(2, 2), out=None, **options)
    with pytest.raises(ValueError, match=r"every|budget|table"):
        DoctorCallback(out=None, **options)
    Watch.validate(out=None, every="auto", raise_on=None, device_maps=False, budget=0.5)


UNCLOSED = """
import sys
from accelerate import Accelerator
from tests.resources.watch_jobs import GroupTensorSGD, ids, tiny_lm
from ds_doctor.api import watch

accelerator = Accelerator(cpu=True)
model = tiny_lm()
model, optimizer = accelerator.prepare(model, GroupTensorSGD([p for p in model.parameters() if p.requires_grad]))
w = watch(accelerator, out=sys.argv[1], every=1)
for step in range(30):
    x, y = ids(step, 0)
    accelerator.backward(model(x, labels=y)["loss"])
    optimizer.step()
    optimizer.zero_grad()
"""


DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def test_a_watch_never_closed_writes_its_last_moments_at_exit(tmp_path: Path) -> None:
    """`w = watch(engine)` and the job ends without `close()`: the report, written at the first moment, is written
    again at exit with every moment since."""
    proc = subprocess.run(
        [sys.executable, "-c", UNCLOSED, str(tmp_path / "w.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        # a job of its own: not the process group this test process may hold (its MASTER_PORT is taken)
        env={
            **{k: v for k, v in os.environ.items() if k not in DIST_ENV},
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
        },
        timeout=GENEROUS_RUN_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = report_of(tmp_path / "w.json")
    assert report.results[-1].case == "watch[step 30]"
    assert report.results[0].notes["watch_moments"]["moments"] == 31

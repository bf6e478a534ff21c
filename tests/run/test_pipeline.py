"""`ds-doctor run` step by step: select -> plan -> launch -> merge -> build -> write -> exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds_doctor.probe.registry import EXTRA_ENV
from ds_doctor.reports.model import CaseResult, ExitCode, Outcome
from ds_doctor.run import pipeline
from ds_doctor.run.plan import Hardware
from ds_doctor.rundir import RunDir


class Recorder:
    """A RunReporter that keeps what it was told."""

    def __init__(self) -> None:
        self.plans: list[tuple[int, str, int, int]] = []
        self.stages: list[tuple[str, int, str]] = []
        self.done: list[CaseResult] = []
        self.notes: list[str] = []

    def planned(self, total: int, device_kind: str, nproc: int, skipped: int) -> None:
        self.plans.append((total, device_kind, nproc, skipped))

    def note(self, line: str) -> None:
        self.notes.append(line)

    def stage(self, case: str, rank: int, stage: str) -> None:
        self.stages.append((case, rank, stage))

    def case_done(self, result: CaseResult) -> None:
        self.done.append(result)

    def tick(self) -> None:
        pass


def test_select_takes_level_and_keyword() -> None:
    cases = pipeline.select(
        pipeline.RunOptions(level=3, keyword="zero_offload and z1 and bf16"), Hardware("cpu", 0), 2
    )
    assert [c.id for c in cases] == [
        "zero_offload[z1-none-bf16-ws1]",
        "zero_offload[z1-none-bf16-ws2]",
        "zero_offload[z1-opt-bf16-ws1]",
        "zero_offload[z1-opt-bf16-ws2]",
    ]
    assert (
        pipeline.select(pipeline.RunOptions(level=2, keyword="zero_offload and z1"), Hardware("cpu", 0), 2)
        == []
    )


def test_the_plan_groups_launches_and_keeps_skips_in_the_selection_order() -> None:
    options = pipeline.RunOptions(level=3, keyword="zero_offload and z1 and bf16", nproc=1)
    # one rank asked for: the two-rank cases cannot run
    run_plan = pipeline.make_plan(options, Hardware("cuda", 1))
    assert [(g.world_size, g.backend, len(g.cases)) for g in run_plan.groups] == [(1, "nccl", 2)]
    assert [p.case for p in run_plan.planned] == [
        "zero_offload[z1-none-bf16-ws1]",
        "zero_offload[z1-opt-bf16-ws1]",
    ]
    assert [(s.case, s.skip_reason) for s in run_plan.skips] == [
        (f"zero_offload[z1-{o}-bf16-ws2]", "needs 2 ranks; this run has 1 GPU(s)") for o in ("none", "opt")
    ]
    assert run_plan.selected[:2] == ("zero_offload[z1-none-bf16-ws1]", "zero_offload[z1-none-bf16-ws2]")
    assert run_plan.planned[0].known_issues == ("ds_z3_offload_gradnorm_device_mismatch",)
    assert pipeline.make_plan(pipeline.RunOptions(level=1)).empty  # environment and hardware only


def test_a_level_1_run_writes_an_environment_only_report(tmp_path: Path) -> None:
    reporter = Recorder()
    report, paths = pipeline.run(
        pipeline.RunOptions(level=1, out_dir=tmp_path, argv=("run", "--level", "1")), reporter
    )
    assert reporter.plans == [(0, "-", 0, 0)] and reporter.done == []
    assert report.results == () and report.run_dir is None and report.exit_code == ExitCode.OK
    assert report.command == ["ds-doctor", "run", "--level", "1"]
    assert sorted(paths) == ["html", "json", "markdown"] and all(p.parent == tmp_path for p in paths.values())
    assert not list(tmp_path.glob("run-*"))


@pytest.mark.multirank
def test_launch_merges_and_reports_each_case_as_it_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EXTRA_ENV, "tests.resources.fault_probes")  # the ranks read the same registry
    options = pipeline.RunOptions(level=3, keyword="faults and (ok or raise)", out_dir=tmp_path)
    run_plan = pipeline.make_plan(options, Hardware("cpu", 0))
    reporter = Recorder()
    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    ctx = pipeline.RunContext(options, run_plan, reporter, env={"packages": {"torch": "2.13.0"}}, hardware={})
    results = pipeline.launch(ctx, run_dir)
    assert [r.case for r in results] == ["faults[ok-ws2]", "faults[raise-ws2]", "faults[ok-after-ws2]"]
    assert [r.case for r in reporter.done] == [r.case for r in results]  # as each finished, in order
    assert [r.outcome for r in results] == [Outcome.PASS, Outcome.ERROR, Outcome.PASS]
    assert results[1].reason == "ValueError: planted failure on rank 1" and results[1].ranks[1].traceback
    assert reporter.stages and {rank for _, rank, _ in reporter.stages} == {0, 1}
    assert [p.name for p in sorted(run_dir.path.iterdir())] == ["ws2-cpu-0"]  # a raise needs no relaunch

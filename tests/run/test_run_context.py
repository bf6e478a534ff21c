"""The run's steps read one value (`RunContext`), and the launches left to exit live in it (`Exits`), not in a list
handed down the steps. No torchrun: fake launches, and a launch's beats as values."""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import pytest

from ds_doctor.plugins import RankOptions
from ds_doctor.probe.rankoptions import DEFAULTS
from ds_doctor.probe.spec import Case
from ds_doctor.releases.overlay import Overlay, Release
from ds_doctor.run import pipeline
from ds_doctor.run.attribution import Ending
from ds_doctor.run.groups import Exits, GroupRun
from ds_doctor.run.launch import Launch, LaunchEvents
from ds_doctor.run.plan import Hardware, LaunchGroup
from ds_doctor.rundir import LAUNCH, WAITING_TURN, Beat, Ended, How, LaunchDir, RankLine, RunDir

CASE = Case("comm", "smoke", "a", 2, 2)


class FakeLaunch:
    """What `Exits` and `GroupRun` ask of a launch: its state, and what was done to it."""

    def __init__(self, *, lines_in: bool = True, folder: Path | None = None) -> None:
        self.lines_in, self.done = lines_in, []
        self.dir = LaunchDir(folder or Path("/nonexistent"))

    def poll(self) -> bool:
        return True  # torchrun still runs

    def unfinished(self) -> list[Case]:
        return [] if self.lines_in else [CASE]

    def complete(self, case_id: str) -> bool:
        return self.lines_in

    def lines_of(self, case: Case) -> list[RankLine]:
        return [RankLine(case.id, rank, 2, ended=Ended(How.RETURNED)) for rank in (0, 1)]

    def blame(self) -> dict[str, list[RankLine]]:
        return {}

    def lost_its_port(self) -> bool:
        return False

    def bound_exit(self) -> None:
        self.done.append("bound")

    def stop(self) -> None:
        self.done.append("stop")

    def finish(self) -> None:
        self.done.append("finish")


def test_the_steps_take_the_run_s_context() -> None:
    for step, count in ((pipeline.on_every_stack, 1), (pipeline.launch, 3), (pipeline.write_manifest, 2)):
        names = list(inspect.signature(step).parameters)
        assert names[:1] == ["ctx"] and len(names) == count, step.__name__


def test_the_launches_left_to_exit_are_awaited_and_on_an_error_killed_first() -> None:
    calm, failed = FakeLaunch(), FakeLaunch()
    with Exits() as exits:
        exits.add(calm)  # type: ignore[arg-type]
        exits.bound()
    assert calm.done == ["bound", "finish"] and list(exits) == []
    with pytest.raises(KeyboardInterrupt), Exits() as exits:
        exits.add(failed)  # type: ignore[arg-type]
        raise KeyboardInterrupt
    assert failed.done == ["stop", "finish"]


def test_a_launch_whose_lines_are_in_goes_to_the_exits_where_the_run_has_them(tmp_path: Path) -> None:
    group = LaunchGroup(2, "cpu", "gloo", (CASE,))

    def group_run(exits: Exits | None, launch: FakeLaunch) -> GroupRun:
        run = GroupRun(
            group,
            RunDir(tmp_path),
            timeout_override=None,
            events=LaunchEvents(),
            cluster=None,
            options=DEFAULTS,
            exits=exits,
        )
        run.launch = launch  # type: ignore[assignment]
        return run

    waited = group_run(None, FakeLaunch())
    waited.poll()
    assert waited.launch is not None  # across the nodes: awaited where it ends
    exits = Exits()
    still = group_run(exits, FakeLaunch(lines_in=False))
    still.poll()
    assert still.launch is not None and list(exits) == []  # a case still runs
    (tmp_path / "launch").mkdir()
    left = FakeLaunch(folder=tmp_path / "launch")
    done = group_run(exits, left)
    done.poll()
    assert done.done and list(exits) == [left] and list(done.results) == [CASE.id]


def test_on_an_overlay_the_ranks_import_it_first_and_build_its_ops(tmp_path: Path) -> None:
    overlay = Overlay((Release("deepspeed", "0.14.2"),), tmp_path / "stack", {"deepspeed": "0.14.2"})
    options = pipeline.RunOptions(ops_ready=True)
    assert pipeline.on_stack(options, None) is options
    on_it = pipeline.on_stack(options, overlay)
    assert on_it.rank.overlay == str(tmp_path / "stack") and not on_it.ops_ready
    assert on_it.rank.extensions_dir == str(tmp_path / "stack" / "torch_extensions")


def test_an_overlay_without_deepspeed_or_torch_keeps_the_stacks_built_ops(tmp_path: Path) -> None:
    """`--with accelerate==X` changes nothing DeepSpeed's ops are built against: no second build."""
    overlay = Overlay((Release("accelerate", "0.15.0"),), tmp_path / "stack", {"accelerate": "0.15.0"})
    built = pipeline.RunOptions(ops_ready=True, rank=RankOptions(extensions_dir=str(tmp_path / "ops")))
    on_it = pipeline.on_stack(built, overlay)
    assert on_it.rank.overlay == str(tmp_path / "stack") and on_it.ops_ready
    assert on_it.rank.extensions_dir == str(tmp_path / "ops")
    with_torch = Overlay(overlay.releases, overlay.path, {"accelerate": "0.15.0", "torch": "2.12.0"})
    assert not pipeline.on_stack(built, with_torch).ops_ready


def test_a_context_with_nothing_planned_makes_no_run_directory(tmp_path: Path) -> None:
    options = pipeline.RunOptions(level=1, out_dir=tmp_path)
    ctx = pipeline.RunContext(
        options, pipeline.make_plan(options, Hardware("cpu", 0)), pipeline.SilentReporter(), {}, {}
    )
    assert pipeline.on_every_stack(ctx) == (None, []) and list(tmp_path.iterdir()) == []
    assert ctx.host == "" and ctx.versions == {} and ctx.exits is None


def test_a_launch_records_each_rank_s_stage_and_names_the_limit_that_ran_out(tmp_path: Path) -> None:
    heard: list[tuple[str, int, str]] = []
    group = LaunchGroup(2, "cpu", "gloo", (CASE,))
    launch = Launch(group, [CASE], LaunchDir(tmp_path), 5.0, LaunchEvents(stage=lambda *s: heard.append(s)))
    now = time.time()
    launch.started = now
    beats = {0: Beat(0, CASE.id, "step", now, now), 1: Beat(1, LAUNCH, WAITING_TURN, now - 60, now)}
    launch._record_stages(beats)
    launch._record_stages(beats)  # told once, where it changed
    assert heard == [(CASE.id, 0, "step"), (LAUNCH, 1, WAITING_TURN)] and launch.waiting_turn() is False
    assert launch._overrun(beats) is None  # waiting for the turn runs out no limit
    late = {0: Beat(0, CASE.id, "step", now - 6, now)}
    assert launch._overrun(late) == Ending(CASE.id, late)
    launch.started = now - 1000
    assert launch._overrun({}) == Ending(LAUNCH, {})  # no rank beat within the launch's own limit

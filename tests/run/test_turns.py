"""Launches of one run at once, taking turns for the cases that run alone (ds_doctor.run.groups)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ds_doctor.probe.spec import Case
from ds_doctor.run.groups import LAUNCHES_ENV, Turns, launches_mode, together
from ds_doctor.run.plan import LaunchGroup
from tests.resources import turn_probes
from tests.test_e2e import ds_doctor, read_report


@dataclasses.dataclass
class FakeLaunch:
    """What `Turns` asks of a launch: does it still run, are its cases in, do all its ranks wait for the turn."""

    name: str
    waiting: bool = False
    cases_left: int = 1
    ended: bool = False
    given: bool = False

    def unfinished(self) -> list[str]:
        return ["case"] * self.cases_left

    def waiting_turn(self) -> bool:
        return self.waiting

    def running(self) -> bool:
        return not self.ended

    def give_turn(self) -> None:
        self.given = True


@dataclasses.dataclass
class FakeRun:
    launch: FakeLaunch | None


def turns_of(*launches: FakeLaunch | None) -> Turns:
    return Turns([FakeRun(launch) for launch in launches])  # type: ignore[arg-type, misc]


def test_the_turn_waits_until_no_other_launch_works_or_exits() -> None:
    first, second = FakeLaunch("ws1", waiting=True), FakeLaunch("ws2")
    turns = turns_of(first, second)
    turns.update()
    assert not first.given and turns.may_start()  # ws2 still runs cases beside it
    second.waiting = True
    turns.update()
    assert (
        first.given and not second.given and not turns.may_start()
    )  # one at a time; no launch starts meanwhile
    first.cases_left = (
        0  # every line of ws1 is in: its ranks and torchrun still exit, work beside a measurement
    )
    turns.update()
    assert not second.given
    first.ended = True
    turns.update()
    assert second.given


def test_a_launch_left_to_exit_holds_the_turn_back_until_it_has() -> None:
    waiting, exiting = FakeLaunch("ws2", waiting=True), FakeLaunch("ws1", cases_left=0)
    turns = Turns([FakeRun(None), FakeRun(waiting)], [exiting])  # type: ignore[list-item]
    turns.update()
    assert not waiting.given
    exiting.ended = True
    turns.update()
    assert waiting.given


def test_a_holder_that_ended_hands_the_turn_on() -> None:
    first, second = FakeLaunch("ws1", waiting=True), FakeLaunch("ws2", waiting=True)
    turns = turns_of(first, second)
    turns.update()
    assert first.given and not second.given
    first.ended = True  # crashed in its turn: its group relaunches the rest later
    turns.update()
    assert second.given


def group(world_size: int, device_kind: str = "cpu", nodes: int = 1) -> LaunchGroup:
    case = Case("comm", "smoke", "all_reduce", world_size, 2, nodes=nodes)
    return LaunchGroup(world_size, device_kind, "gloo" if device_kind == "cpu" else "nccl", (case,), nodes)


def test_a_nodes_launches_run_together_on_its_cpu_and_one_by_one_elsewhere_unless_told() -> None:
    cpu, gpu = [group(1), group(2)], [group(1, "cuda"), group(2, "cuda")]
    assert together(cpu, "auto", across_nodes=False)
    assert not together(gpu, "auto", across_nodes=False)  # not yet measured on a GPU
    assert together(gpu, "together", across_nodes=False)
    assert not together(cpu, "one-by-one", across_nodes=False)
    assert not together(cpu, "together", across_nodes=True)  # every node expects its launches in one order
    assert not together([group(1), group(4, nodes=2)], "together", across_nodes=False)


def test_the_launch_mode_is_read_once_and_a_typo_is_a_usage_error(tmp_path: Path) -> None:
    assert launches_mode({}) == "auto" and launches_mode({LAUNCHES_ENV: "one-by-one"}) == "one-by-one"
    with pytest.raises(ValueError, match="is none of auto, together, one-by-one"):
        launches_mode({LAUNCHES_ENV: "sideways"})
    proc = ds_doctor(
        "run", "--level", "2", "--out", str(tmp_path / "out"), extra_env={LAUNCHES_ENV: "sideways"}
    )
    assert (proc.returncode, proc.stderr) == (
        2,
        "ds-doctor: error: DS_DOCTOR_LAUNCHES='sideways' is none of auto, together, one-by-one\n",
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.multirank
@pytest.mark.loaded  # `make test` runs it beside its sessions and a CPU hog: turns must hold when cores are taken
def test_launches_run_at_once_and_a_case_that_runs_alone_overlaps_no_other(tmp_path: Path) -> None:
    """Two real launches (ws1, ws2) of a run: the busy cases of both overlap in time, and each timed case (one that
    runs alone) overlaps no case of the other launch."""
    proc = ds_doctor(
        "run", "--level", "2", "-k", "turn_", "--out", str(tmp_path),
        extra_env={"DS_DOCTOR_EXTRA_PROBES": turn_probes.REGISTER},
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(tmp_path)
    spans = {
        (r["case"], r["world_size"]): (r["notes"]["started"], r["notes"]["ended"]) for r in report["results"]
    }
    assert len(spans) == 4, spans

    def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] < b[1] and b[0] < a[1]

    assert overlap(spans[("turn_busy[once-ws1]", 1)], spans[("turn_busy[once-ws2]", 2)])
    for ws, other in ((1, 2), (2, 1)):
        timed = spans[(f"turn_timed[once-ws{ws}]", ws)]
        for case in ("turn_busy", "turn_timed"):
            assert not overlap(timed, spans[(f"{case}[once-ws{other}]", other)]), (ws, case, spans)
    run_dir = next(tmp_path.glob("run-*"))
    assert sorted(p.parent.name for p in run_dir.glob("ws*/alone-turn")) == ["ws1-cpu-0", "ws2-cpu-0"]
    assert json.loads((run_dir / "ws2-cpu-0" / "cases.json").read_text())["cases"] == [
        "turn_busy[once-ws2]",
        "turn_timed[once-ws2]",
    ]

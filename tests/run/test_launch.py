"""Pieces of the launcher that parse what torchrun and the ranks leave behind, and a launch whose port was taken."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from ds_doctor.knowledge import catalog
from ds_doctor.probe.registry import find_case
from ds_doctor.reports.model import Outcome
from ds_doctor.run import command
from ds_doctor.run.command import free_port
from ds_doctor.run.groups import run_groups
from ds_doctor.run.launch import PORT_TAKEN, LaunchEvents, LineTail, exit_codes, signal_name
from ds_doctor.run.plan import LaunchGroup
from ds_doctor.rundir import How, RankLine, RunDir

RESOURCES = Path(__file__).resolve().parents[1] / "resources"


def test_exit_codes_are_read_per_rank_from_torchrun_summary() -> None:
    # Recorded from a real launch where rank 1 was SIGKILLed and rank 0 then exited with 1.
    assert exit_codes((RESOURCES / "torchrun_sigkill.log").read_text()) == {1: -9, 0: 1}


def test_signal_names() -> None:
    assert signal_name(-9) == "SIGKILL" and signal_name(-11) == "SIGSEGV" and signal_name(-6) == "SIGABRT"
    assert signal_name(3) is None and signal_name(None) is None


def test_the_line_tail_waits_for_a_line_to_end(tmp_path: Path) -> None:
    path = tmp_path / "rank0.jsonl"
    tail = LineTail(path)
    assert tail.read_new() == []
    first, second = (RankLine(case, 0, 1, Outcome.PASS).to_json() for case in ("a[x-ws1]", "b[x-ws1]"))
    path.write_text(first + "\n" + second[:20])
    assert [line.case for line in tail.read_new()] == ["a[x-ws1]"]
    with path.open("a") as handle:
        handle.write(second[20:] + "\n")
    assert [line.case for line in tail.read_new()] == ["b[x-ws1]"]
    assert tail.read_new() == []


def test_free_port_is_a_loopback_port() -> None:
    assert 1024 < free_port() < 65536


def test_a_launch_whose_master_port_was_taken_runs_again_on_a_new_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`free_port` closes the port it found before torchrun binds it: another process can take it between (a launch
    beside this one, another job on a busy node). Real torchrun, the port held by a listening socket: the launch that
    lost it ran nothing, so nothing is blamed, and its cases run again on a new port, as one more attempt."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        ports = iter([int(held.getsockname()[1])])
        monkeypatch.setattr(command, "free_port", lambda: next(ports, None) or free_port())
        case = find_case("comm[all_reduce-ws2]")
        run = RunDir(tmp_path / "run")
        run.path.mkdir()
        results = run_groups(
            [LaunchGroup(2, "cpu", "gloo", (case,))], run, timeout_override=None, events=LaunchEvents()
        )
    lines = results[case.id]
    assert [(line.ended and line.ended.how, line.findings) for line in lines] == [(How.RETURNED, ())] * 2
    first, second = run.launch("ws2", "cpu", 0), run.launch("ws2", "cpu", 1)
    port_taken = catalog.get(PORT_TAKEN)
    assert port_taken.matches(first.torchrun_log.read_text()) and not first.read_beats()
    assert second.read_beats() and not port_taken.matches(second.torchrun_log.read_text())

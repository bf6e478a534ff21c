"""Pieces of the launcher that parse what torchrun and the ranks leave behind."""

from __future__ import annotations

from pathlib import Path

from ds_doctor.reports.model import Outcome
from ds_doctor.run.command import free_port
from ds_doctor.run.launch import LineTail, exit_codes, signal_name
from ds_doctor.rundir import RankLine

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

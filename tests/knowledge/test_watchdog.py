"""NCCL watchdog lines across ranks (tests/resources/watchdog: built from the documented format, see its README)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from doctor.cli import main
from doctor.knowledge.watchdog import read_watchdog, watchdog_findings

LOGS = Path(__file__).resolve().parents[1] / "resources" / "watchdog"


def test_the_rank_that_never_timed_out_is_named() -> None:
    report = read_watchdog((LOGS / "three_of_four.log").read_text())
    assert report is not None and [t.rank for t in report.timeouts] == [0, 1, 3]
    assert {(t.seq, t.op, t.numel_in, t.group) for t in report.timeouts} == {(808, "ALLREDUCE", 9801523, "0(default_pg)")}
    assert report.world_size == 4 and report.silent == (2,)  # rank 2 speaks elsewhere in the log, never times out
    findings = watchdog_findings(report)
    assert [(f.invariant, f.rank) for f in findings] == [("missing_rank", 2)]
    assert "ranks 0, 1, 3 in ALLREDUCE (SeqNum=808" in findings[0].message


def test_ranks_timing_out_in_different_collectives_are_a_mismatch() -> None:
    findings = watchdog_findings(read_watchdog((LOGS / "mismatch.log").read_text()))
    assert [f.invariant for f in findings] == ["collective_mismatch"]
    assert "rank 0 is in ALLREDUCE (SeqNum=41, NumelIn=1024" in findings[0].message
    assert "rank 1 is in _ALLGATHER_BASE (SeqNum=41, NumelIn=8" in findings[0].message


def test_the_world_size_names_ranks_the_log_never_mentions() -> None:
    report = read_watchdog((LOGS / "mismatch.log").read_text(), world_size=4)
    assert report is not None and report.silent == (2, 3)


def test_a_log_without_watchdog_lines_reads_as_none() -> None:
    assert read_watchdog("epoch 1 loss 0.3\n[rank0]: all good\n") is None


def test_cli_prints_the_watchdog_findings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["triage", str(LOGS / "three_of_four.log")]) == 0
    out = capsys.readouterr().out
    assert "[nccl_watchdog_timeout]" in out and "missing_rank: rank 2 never reported" in out
    assert main(["triage", "--json", "--world-size", "4", str(LOGS / "mismatch.log")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [f["invariant"] for f in data["findings"]] == ["collective_mismatch", "missing_rank", "missing_rank"]
    assert data["watchdog"]["world_size"] == 4

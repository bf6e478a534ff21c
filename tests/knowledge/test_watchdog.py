"""NCCL watchdog lines across ranks (tests/resources/watchdog: built from the documented format, see its README)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ds_doctor.cli import main
from ds_doctor.knowledge.watchdog import read_watchdog, watchdog_findings
from ds_doctor.reports.model import Severity
from ds_doctor.userinput import UserInputError
from tests.bounds import GENEROUS_S

LOGS = Path(__file__).resolve().parents[1] / "resources" / "watchdog"


def test_the_rank_that_never_timed_out_is_named() -> None:
    report = read_watchdog((LOGS / "three_of_four.log").read_text())
    assert report is not None and [t.rank for t in report.timeouts] == [0, 1, 3]
    assert {(t.seq, t.op, t.numel_in, t.group) for t in report.timeouts} == {
        (808, "ALLREDUCE", 9801523, "0(default_pg)")
    }
    # rank 2 speaks elsewhere in the log, never times out
    assert report.world_size == 4 and report.silent == (2,)
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


def test_torch_214_lines_name_their_group_and_ranks_are_the_global_ones() -> None:
    """torch 2.14's line carries its group and the rank in it; the global rank is torch's `[rankN]:` prefix. Work
    numbers count per group: #40 of group 3 is not behind #120 of the default group."""
    report = read_watchdog((LOGS / "torch214_groups.log").read_text())
    assert report is not None
    assert [(t.rank, t.group, t.seq, t.op) for t in report.timeouts] == [
        (0, "0(default_pg)", 120, "ALLREDUCE"),
        (2, "3", 40, "ALLTOALL_BASE"),
        (3, "3", 40, "ALLTOALL_BASE"),
    ]
    findings = watchdog_findings(report)
    assert [(f.invariant, f.rank) for f in findings] == [("missing_rank", 1)]


def test_a_stale_rank_in_the_line_gives_way_to_the_rank_prefix() -> None:
    """Before 2.14 a WorkNCCL line's `[Rank N]` was the rank in the first group the process used (pytorch#191305):
    two processes both saying `[Rank 0]` are two ranks."""
    log = f"[rank2]:[E1124 ProcessGroupNCCL.cpp:616] {timeout_line('0', '7')}[rank0]:[E1124] {timeout_line('0', '9')}"
    report = read_watchdog(log, world_size=3)
    assert report is not None and [(t.rank, t.seq) for t in report.timeouts] == [(0, 9), (2, 7)]
    assert report.silent == (1,)


def test_a_log_without_watchdog_lines_reads_as_none() -> None:
    assert read_watchdog("epoch 1 loss 0.3\n[rank0]: all good\n") is None


def test_cli_prints_the_watchdog_findings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["triage", str(LOGS / "three_of_four.log")]) == 0
    out = capsys.readouterr().out
    assert "[nccl_watchdog_timeout]" in out and "missing_rank: rank 2 never reported" in out
    assert main(["triage", "--json", "--world-size", "4", str(LOGS / "mismatch.log")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [f["invariant"] for f in data["findings"]] == [
        "collective_mismatch",
        "missing_rank",
        "missing_rank",
    ]
    assert data["watchdog"]["world_size"] == 4
    assert main(["triage", "--json", str(LOGS / "torch214_groups.log")]) == 0
    data = json.loads(capsys.readouterr().out)  # the timeout is the cause, the stuck watchdog follows from it
    assert [m["id"] for m in data["matches"]][:2] == [
        "nccl_watchdog_timeout",
        "nccl_watchdog_heartbeat_stuck",
    ]


def timeout_line(rank: str, seq: str = "808") -> str:
    return (
        f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.\n"
    )


# int() refuses it: was a ValueError, exit 3
@pytest.mark.parametrize(
    ("log", "world_size", "needle"),
    [
        (timeout_line("99999999999"), None, "the log names rank 99,999,999,999: beyond the 1,048,576 ranks"),
        (timeout_line("1" * 5000), None, "a number of 5,000 digits"),
        (timeout_line("0", "9" * 5000), None, "a number of 5,000 digits"),
        (timeout_line("0") + "[rank123456789]: hello\n", None, "the log names rank 123,456,789: beyond"),
        ("epoch 1\n", 10**12, "--world-size 1,000,000,000,000: beyond the 1,048,576 ranks"),
    ],
)
def test_a_rank_or_world_size_past_the_bound_is_one_line_before_anything_is_sized(
    log: str, world_size: int | None, needle: str
) -> None:
    with pytest.raises(UserInputError) as caught:
        read_watchdog(log, world_size)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_a_million_ranks_that_never_timed_out_are_one_finding() -> None:
    start = time.monotonic()
    report = read_watchdog(timeout_line("0") + timeout_line("999999"), world_size=1_000_000)
    findings = watchdog_findings(report)  # type: ignore[arg-type]
    assert [f.invariant for f in findings] == ["missing_rank"] and findings[0].rank is None
    assert findings[0].message.startswith("999,998 ranks (1-999998) never reported")
    assert (
        time.monotonic() - start < GENEROUS_S
    )  # a finding per rank, or a rank against every rank: far longer


def test_cli_world_size_past_the_bound_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["triage", "--world-size", "2000000", str(LOGS / "mismatch.log")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("ds-doctor: error:") and "--world-size" in err and len(err.strip().splitlines()) == 1
    )


def test_ranks_at_one_work_are_not_behind_when_one_group_line_is_missing() -> None:
    """A log cut before rank 2's group line: all three ranks sit at work 808, so no rank is behind (before: every
    rank was "behind" others "already at work #", the seq list empty)."""
    lines = [
        f"[rank{r}]:[E626 06:24:44 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) "
        "ran for 600020 milliseconds before timing out."
        for r in range(3)
    ]
    groups = [
        f"[rank{r}]:[E626 06:24:44 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Exception "
        "(either an error or timeout) detected by watchdog at work: 808, last enqueued NCCL work: 811, last "
        "completed NCCL work: 807."
        for r in range(2)
    ]
    assert watchdog_findings(read_watchdog("\n".join(lines + groups))) == []


def test_a_log_cut_short_says_possibly_where_the_whole_one_says_never() -> None:
    """A ticket shows ~2,000 characters: a rank whose timeout line falls past the excerpt's end is no rank that never
    entered the collective. Where the log reaches torchrun's teardown (or the rank speaks after the timeouts), its
    silence is its own: an error; else a warning that says possibly, and how to confirm."""
    from ds_doctor.knowledge.triage import read_log
    from ds_doctor.reports.model import Severity

    whole = (LOGS / "three_of_four.log").read_text()
    (finding,) = read_log(whole, {}).findings
    assert (
        finding.severity == Severity.ERROR and "rank 2 never reported a watchdog timeout" in finding.message
    )
    cut = whole[: whole.index("Sending process")]
    (finding,) = read_log(cut, {}).findings
    assert finding.severity == Severity.WARNING and finding.rank == 2
    assert (
        "possibly rank 2 never entered that collective (confirm with its full log, or its stack)"
        in finding.message
    )


def stuck_line(rank: int, stamp: str) -> str:
    """A rank's heartbeat monitor saying its watchdog got stuck, as torch's log writes it."""
    return (
        f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:1743] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
        "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
        "collectives.\n"
    )


def test_matches_are_named_in_the_order_their_lines_were_written() -> None:
    """Two ranks' logs pasted one after the other: rank 0's heartbeat abort comes first in the text but 8 minutes
    after rank 1's collective timeout, which it echoes. The timeout is named first."""
    from ds_doctor.knowledge.triage import triage

    rank0 = stuck_line(0, "E1121 04:59:10.100000 5121")
    rank1 = "[rank1]:[E1121 04:51:10.402917 5122 ProcessGroupNCCL.cpp:616] " + timeout_line("1", "808") + "\n"
    assert [m.issue.id for m in triage(rank0 + rank1, {})] == [
        "nccl_watchdog_timeout",
        "nccl_watchdog_heartbeat_stuck",
    ]
    # a line without a time: the log's own order
    assert [m.issue.id for m in triage(rank0 + rank1.split("] ", 1)[1], {})] == [
        "nccl_watchdog_heartbeat_stuck",
        "nccl_watchdog_timeout",
    ]


def test_glog_months_without_a_leading_zero_are_ordered_too() -> None:
    """glog writes June as `E626` (three digits): the stamps still order the matches (a held-out ticket, 2025)."""
    from ds_doctor.knowledge.triage import triage

    rank7 = stuck_line(7, "E626 05:14:36.393067540")
    rank2 = "[rank2]:[E626 05:06:30.929096625 ProcessGroupNCCL.cpp:632] " + timeout_line("2", "120049") + "\n"
    assert [m.issue.id for m in triage(rank7 + rank2, {})] == [
        "nccl_watchdog_timeout",
        "nccl_watchdog_heartbeat_stuck",
    ]
    # a three-digit month (September) sorts before a four-digit one (October), as the zero-padded dates do
    october = rank2.replace("E626 05:06:30", "E1001 05:06:30")
    september = rank7.replace("E626 05:14:36", "E930 05:14:36")
    assert [m.issue.id for m in triage(october + september, {})] == [
        "nccl_watchdog_heartbeat_stuck",
        "nccl_watchdog_timeout",
    ]


def test_a_rank_whose_own_watchdog_got_stuck_is_not_said_to_have_skipped_the_collective() -> None:
    """Its silence after the others' timeouts is no evidence: a stuck watchdog cannot report a timeout."""
    timeouts = "".join(
        f"[rank{r}]:[E626 05:06:30.929 ProcessGroupNCCL.cpp:632] " + timeout_line(str(r), "120049") + "\n"
        for r in (0, 2, 3)
    )
    report = read_watchdog(timeouts + stuck_line(1, "E626 05:14:36.393"))
    assert report is not None and report.stuck == (1,) and 1 in report.seen_after
    (finding,) = watchdog_findings(report)
    assert finding.severity == Severity.WARNING and finding.rank == 1
    assert "its own watchdog got stuck" in finding.message and "unknown" in finding.message

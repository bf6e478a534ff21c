"""Console output where stdout is no terminal (CI logs, `| tee`): one plain line per finished case as it finishes,
and a compact summary (the counts, each case that failed the run on one short line); on a terminal a summary
table that never cuts a case id or a column header."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

from ds_doctor.reports.console import (
    QUIET_S,
    SUMMARY_WIDTH,
    RunProgress,
    case_line,
    environment_lines,
    make_console,
    print_summary,
)
from ds_doctor.reports.model import Outcome, Report
from tests.reports.samples import a_failed_case, a_report, case, every_outcome

LONG = "accelerate_deepspeed_lifecycle[scheduler-second-prepare-auto-ws2]"


def test_each_finished_case_is_one_plain_line(capsys: pytest.CaptureFixture[str]) -> None:
    progress = RunProgress(make_console(), "0.1.0", 2)
    progress.planned(3, "cpu", 2, 1)
    progress.stage("comm[all_reduce-ws2]", 0, "timing")  # no live bar here: nothing printed
    progress.case_done(
        case(Outcome.PASS, "all_reduce", probe="comm", world_size=2, measures={"busbw_gbps": 1.25})
    )
    progress.case_done(case(Outcome.PASS, "all_reduce", probe="comm", measures={"busbw_gbps": 0.0}))
    failed = a_report([a_failed_case()]).results[0]  # scrubbed, as the pipeline hands results over
    progress.case_done(failed)
    progress.case_done(failed)  # reported once
    progress.close()
    assert capsys.readouterr().out.splitlines() == [
        "ds-doctor 0.1.0: level 2, 3 case(s) to run on cpu with up to 2 ranks, 1 skipped",
        "comm[all_reduce-ws2] PASS 0.2s busbw 1.25 GB/s",
        "comm[all_reduce-ws1] PASS 0.2s busbw — (one rank: no data moves between ranks)",
        "zero_offload[z3-opt-bf16-ws2] FAIL 1.5s bad placement; token <redacted>",
    ]


def test_off_a_terminal_a_run_never_stays_quiet_longer_than_quiet_s(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A case that takes minutes on a loaded node (no line until it ends): a line says what still runs."""
    progress = RunProgress(make_console(), "0.1.0", 2)
    progress.planned(1, "cpu", 2, 0)
    progress.tick()  # nothing runs yet, and a line was just said
    progress.stage("equivalence[deepspeed-z3-ws2]", 1, "step 2")
    progress.tick()
    progress.last_said -= QUIET_S  # as if QUIET_S passed
    progress.tick()
    progress.tick()  # it just said so
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == [
        f"... still running: equivalence[deepspeed-z3-ws2] · rank 1 · step 2 ({QUIET_S:.0f} s since the last line)"
    ]


def summary_out(report: Report, *, terminal: bool, width: int = 200) -> str:
    buffer = io.StringIO()
    print_summary(report, Console(file=buffer, force_terminal=terminal, color_system=None, width=width))
    return buffer.getvalue()


def test_on_a_terminal_the_summary_is_a_table_that_never_cuts_case_ids_or_headers() -> None:
    results = [
        case(
            Outcome.PASS,
            LONG.split("[")[1].removesuffix("-ws2]"),
            probe=LONG.split("[")[0],
            world_size=2,
            reason=None,
        )
    ]
    out = summary_out(a_report([*results, a_failed_case()]), terminal=True)
    assert LONG in out and "zero_offload[z3-opt-bf16-ws2]" in out
    header = next(line for line in out.splitlines() if "case" in line and "outcome" in line)
    assert all(word in header for word in ("case", "outcome", "time", "details"))
    assert "…" not in out and "node1: 0 GPU(s), 2 CPUs · 1 pass, 1 fail" in out


# ~5,000 characters
LONG_DETAIL = "RuntimeError: " + "the stack under diagnosis said something very long " * 100


def test_off_a_terminal_the_summary_counts_and_lists_each_case_that_failed_the_run_on_one_short_line() -> (
    None
):
    results = [
        dataclasses.replace(r, reason=LONG_DETAIL) if r.outcome != Outcome.PASS else r
        for r in every_outcome()
    ]
    report = a_report([*results, case(Outcome.PASS, "healthy-but-chatty", reason=LONG_DETAIL)])
    out = summary_out(report, terminal=False)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= SUMMARY_WIDTH, max(lines, key=len)
    assert (
        lines[0] == "node1: 0 GPU(s), 2 CPUs · 2 pass, 1 fail, 1 error, 1 skip, 1 timeout, 1 xfail, 1 xpass"
    )
    assert lines[1] == "3 case(s) failed the run:"
    listed = {line.split()[0]: line.split()[1] for line in lines[2:5]}
    assert listed == {
        "zero_offload[z3-opt-bf16-ws2]": "FAIL",
        "frozen_param_names[boom-ws1]": "ERROR",
        "frozen_param_names[hang-ws1]": "TIMEOUT",
    }
    assert all(
        line.endswith("…") and "RuntimeError: the stack under diagnosis" in line for line in lines[2:5]
    )
    assert not any(name in out for name in ("no-gpu", "set-tensor", "healthy"))  # counted, not listed
    assert lines[5].startswith("affected by ds_z3_offload_gradnorm_device_mismatch") and len(lines) == 8
    # the xpass reproduction: a fact about the library, one line after what concerns this stack
    assert lines[-1].startswith(
        "library traps run on purpose: 0 reproduced as designed, 1 absent at these versions"
    )
    assert "┃" not in out and "│" not in out  # no table


def test_off_a_terminal_a_clean_run_says_so_in_one_line_and_a_multinode_line_says_where() -> None:
    assert summary_out(a_report([case(Outcome.PASS, "ok")]), terminal=False).splitlines() == [
        "node1: 0 GPU(s), 2 CPUs · 1 pass"
    ]
    assert summary_out(a_report([]), terminal=False).splitlines() == [
        "node1: 0 GPU(s), 2 CPUs · no cases ran"
    ]
    report = dataclasses.replace(
        a_report([dataclasses.replace(a_failed_case(), node=1)]),
        nodes=(
            {"node": 0, "host": "node1", "hardware": {"gpus": [], "cpus": 2}},
            {"node": 1, "host": "node2", "hardware": {"gpus": [], "cpus": 2}},
        ),
    )
    line = summary_out(report, terminal=False).splitlines()[2]
    assert line.startswith("  zero_offload[z3-opt-bf16-ws2] (node 1 (node2)) FAIL ")


def test_make_console_off_a_terminal_gives_the_compact_summary(capsys: pytest.CaptureFixture[str]) -> None:
    print_summary(a_report(every_outcome()), make_console())
    out = capsys.readouterr().out
    assert "3 case(s) failed the run:" in out and "┃" not in out


def test_a_failing_case_line_carries_its_reason() -> None:
    assert case_line(a_failed_case()).startswith("zero_offload[z3-opt-bf16-ws2] FAIL 1.5s bad placement")


def test_env_lines() -> None:
    env = {
        "python": "3.11.7",
        "platform": "Linux",
        "cuda": None,
        "nccl": None,
        "driver": None,
        "cuda_driver": None,
        "packages": {"torch": "2.13.0", "deepspeed": None},
        "variables": {"NCCL_DEBUG": "INFO"},
    }
    hardware = {"host": "node1", "cpus": 2, "memory_bytes": 1 << 30, "gpus": [], "gpus_reason": "no driver"}
    lines = environment_lines(env, hardware)
    assert lines[0].startswith("host: node1") and "gpus: none (no driver)" in lines
    assert "deepspeed: not installed" in lines and "NCCL_DEBUG=INFO" in lines

"""Console output where stdout is no terminal (CI logs, `| tee`): one plain line per finished case as it finishes,
and a summary that never cuts a case id or a column header."""

from __future__ import annotations

import pytest

from reports.console import RunProgress, case_line, environment_lines, make_console, print_summary
from reports.records import Outcome
from tests.reports.samples import a_failed_case, a_report, case

LONG = "accelerate_deepspeed_lifecycle[scheduler-second-prepare-auto-ws2]"


def test_each_finished_case_is_one_plain_line(capsys: pytest.CaptureFixture[str]) -> None:
    progress = RunProgress(make_console(), "0.1.0", 2)
    progress.planned(3, "cpu", 2, 1)
    progress.stage("comm[all_reduce-ws2]", 0, "timing")  # no live bar here: nothing printed
    progress.case_done(case(Outcome.PASS, "all_reduce", probe="comm", world_size=2, measures={"busbw_gbps": 1.25}))
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


def test_the_summary_never_cuts_case_ids_or_headers(capsys: pytest.CaptureFixture[str]) -> None:
    results = [case(Outcome.PASS, LONG.split("[")[1].removesuffix("-ws2]"), probe=LONG.split("[")[0], world_size=2,
                    reason=None)]
    print_summary(a_report([*results, a_failed_case()]), make_console())
    out = capsys.readouterr().out
    assert LONG in out and "zero_offload[z3-opt-bf16-ws2]" in out
    header = next(line for line in out.splitlines() if "case" in line and "outcome" in line)
    assert all(word in header for word in ("case", "outcome", "time", "details"))
    assert "…" not in out


def test_a_failing_case_line_carries_its_reason() -> None:
    assert case_line(a_failed_case()).startswith("zero_offload[z3-opt-bf16-ws2] FAIL 1.5s bad placement")


def test_env_lines() -> None:
    env = {"python": "3.11.7", "platform": "Linux", "cuda": None, "nccl": None, "driver": None, "cuda_driver": None,
           "packages": {"torch": "2.13.0", "deepspeed": None}, "variables": {"NCCL_DEBUG": "INFO"}}
    hardware = {"host": "node1", "cpus": 2, "memory_bytes": 1 << 30, "gpus": [], "gpus_reason": "no driver"}
    lines = environment_lines(env, hardware)
    assert lines[0].startswith("host: node1") and "gpus: none (no driver)" in lines
    assert "deepspeed: not installed" in lines and "NCCL_DEBUG=INFO" in lines

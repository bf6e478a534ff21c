"""The report model: JSON round trip, schema, Markdown, and redaction at build time."""

from __future__ import annotations

import datetime as dt

import pytest
import torch

from doctor.devicemap import Recorder
from doctor.invariants import Finding
from doctor.outcomes import Outcome
from doctor.runner import build_report, exit_code
from reports.markdown import render_markdown
from reports.model import CaseResult, RankSummary, Report, validate

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)
TOKEN = "hf_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9"


def a_failed_case() -> CaseResult:
    rec = Recorder(1, "after_step")
    rec.add(torch.zeros(8, device="meta"), role="fp32_partition", path="optimizer.fp32_partitioned_groups_flat[0]")
    finding = Finding("fp32_partition_placement", "error", "1 fp32 partition(s) not on cpu", 1, "after_step", "cpu",
                      tuple(rec.records))
    return CaseResult(
        probe="zero_offload", case="zero_offload[z3-opt-bf16-ws2]", scenario="S2", level=3, world_size=2,
        device_kind="cpu", outcome=Outcome.FAIL, duration_s=1.5, reason=f"bad placement; token {TOKEN}",
        known_issue={"id": "ds_z3_offload_gradnorm_device_mismatch", "verdict": "affected", "remedy": "upgrade",
                     "refs": ["https://github.com/deepspeedai/DeepSpeed/issues/5538"]},
        findings=(finding,), device_map=tuple(rec.records),
        ranks=(RankSummary(0, "pass"), RankSummary(1, "fail", "after_step", stderr_tail=f"--token={TOKEN}")),
    )


def a_report(results: list[CaseResult]) -> Report:
    env = {"python": "3.11", "packages": {"deepspeed": "0.19.8"}, "variables": {"NCCL_DEBUG": "INFO"}}
    hardware = {"host": "node1", "cpus": 2, "memory_bytes": 1 << 30, "gpus": []}
    return build_report(started=NOW, finished=NOW, level=3, argv=("run", f"--token={TOKEN}"), env=env,
                        hardware=hardware, results=results, run_dir=None)


def test_report_round_trips_and_validates() -> None:
    report = a_report([a_failed_case()])
    data = report.to_dict()
    validate(data)
    assert Report.from_dict(data).to_dict() == data
    assert data["summary"]["fail"] == 1 and data["affecting_issues"][0]["cases"] == ["zero_offload[z3-opt-bf16-ws2]"]
    assert exit_code(report) == 1


def test_secrets_are_gone_from_every_format() -> None:
    report = a_report([a_failed_case()])
    assert TOKEN not in report.to_json()
    assert TOKEN not in render_markdown(report)
    assert "--token=<redacted>" in report.to_json()


def test_markdown_shows_the_offending_rows_and_remedy() -> None:
    text = render_markdown(a_report([a_failed_case()]))
    assert "### `zero_offload[z3-opt-bf16-ws2]` — fail" in text
    assert "`optimizer.fp32_partitioned_groups_flat[0]`" in text and "| meta |" in text
    assert "verdict **affected**" in text and "issues/5538" in text
    assert "<details><summary>Device map of" in text


@pytest.mark.parametrize("bad", [{"schema_version": 2}, {"results": "nope"}])
def test_schema_rejects_malformed_reports(bad) -> None:
    import jsonschema

    data = {**a_report([]).to_dict(), **bad}
    with pytest.raises(jsonschema.ValidationError):
        validate(data)


def test_all_pass_exits_zero() -> None:
    assert exit_code(a_report([])) == 0


def test_warnings_are_listed_once_with_their_cases() -> None:
    warning = Finding("grad_accum_dtype", "warning", "bf16 accumulates in bf16", 0)
    passed = [CaseResult(probe="zero_offload", case=f"zero_offload[z3-{i}-ws1]", scenario="S2", level=3, world_size=1,
                         device_kind="cpu", outcome=Outcome.PASS, duration_s=1.0, findings=(warning, warning))
              for i in range(3)]
    text = render_markdown(a_report(passed))
    assert text.count("bf16 accumulates in bf16") == 1 and "3 case(s)" in text
    assert "Cases that need a look" not in text


def test_report_records_the_arguments_main_was_given(capsys, tmp_path) -> None:
    import json

    from doctor.cli import main

    assert main(["run", "--level", "1", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    data = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert data["command"] == ["ds-doctor", "run", "--level", "1", "--out", str(tmp_path)]

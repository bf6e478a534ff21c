"""Reports made of planted case results, shared by the renderer tests (built through the one builder, so they
are scrubbed like a real run's)."""

from __future__ import annotations

import datetime as dt

import torch

from ds_doctor.collect.devicemap import Recorder
from ds_doctor.reports.records import (
    CaseResult,
    Finding,
    IssueRef,
    Outcome,
    RankSummary,
    Report,
    Severity,
    Verdict,
)
from ds_doctor.run.build import build_report

NOW = dt.datetime(2026, 11, 21, 12, 0, tzinfo=dt.timezone.utc)
TOKEN = "hf_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp9"


def issue(issue_id: str, verdict: Verdict, remedy: str = "upgrade", refs: tuple[str, ...] = ()) -> IssueRef:
    return IssueRef(
        id=issue_id,
        title=f"title of {issue_id}",
        verdict=verdict,
        affected_versions="deepspeed >=0.14.1",
        remedy=remedy,
        refs=refs,
    )


def a_failed_case() -> CaseResult:
    rec = Recorder(1, "after_step")
    rec.add(
        torch.zeros(8, device="meta"), role="fp32_partition", path="optimizer.fp32_partitioned_groups_flat[0]"
    )
    finding = Finding(
        "fp32_partition_placement",
        Severity.ERROR,
        "1 fp32 partition(s) not on cpu",
        1,
        "after_step",
        "cpu",
        tuple(rec.records),
    )
    return CaseResult(
        probe="zero_offload",
        case="zero_offload[z3-opt-bf16-ws2]",
        scenario="S2",
        level=3,
        world_size=2,
        device_kind="cpu",
        outcome=Outcome.FAIL,
        duration_s=1.5,
        reason=f"bad placement; token {TOKEN}",
        known_issue=issue(
            "ds_z3_offload_gradnorm_device_mismatch",
            Verdict.AFFECTED,
            refs=("https://github.com/deepspeedai/DeepSpeed/issues/5538",),
        ),
        findings=(finding,),
        device_map=tuple(rec.records),
        ranks=(RankSummary(0, "pass"), RankSummary(1, "fail", "after_step", stderr_tail=f"--token={TOKEN}")),
    )


def case(
    outcome: Outcome, name: str, probe: str = "frozen_param_names", world_size: int = 1, **fields: object
) -> CaseResult:
    return CaseResult(
        probe=probe,
        case=f"{probe}[{name}-ws{world_size}]",
        scenario="S1",
        level=3,
        world_size=world_size,
        device_kind="cpu",
        outcome=outcome,
        duration_s=0.25,
        **fields,
    )


def every_outcome() -> list[CaseResult]:
    return [
        a_failed_case(),
        case(Outcome.PASS, "z2-healthy"),
        case(
            Outcome.ERROR,
            "boom",
            reason="ValueError: x",
            ranks=(
                RankSummary(
                    0, "error", "save", reason="ValueError: x", traceback="Traceback ...\nValueError: x"
                ),
            ),
        ),
        case(
            Outcome.TIMEOUT,
            "hang",
            reason="timed out after 6 s on rank 0",
            ranks=(RankSummary(0, "timeout", "stuck"),),
        ),
        case(Outcome.SKIP, "no-gpu", reason="needs 2 ranks"),
        case(
            Outcome.XFAIL,
            "z2-set-tensor",
            reason="emb.weight is not a key",
            known_issue=issue("ds_frozen_param_not_in_param_names", Verdict.AFFECTED),
        ),
        case(
            Outcome.XPASS,
            "z0-set-tensor",
            known_issue=issue("ds_frozen_param_not_in_param_names", Verdict.NOT_AFFECTED),
        ),
    ]


def a_report(results: list[CaseResult], level: int = 3) -> Report:
    env = {"python": "3.11", "packages": {"deepspeed": "0.19.8"}, "variables": {"NCCL_DEBUG": "INFO"}}
    hardware = {"host": "node1", "cpus": 2, "memory_bytes": 1 << 30, "gpus": []}
    return build_report(
        started=NOW,
        finished=NOW,
        level=level,
        argv=("run", f"--token={TOKEN}"),
        env=env,
        hardware=hardware,
        results=results,
        run_dir=None,
    )

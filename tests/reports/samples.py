"""Reports made of planted case results, shared by the renderer tests (built through the one builder, so they
are scrubbed like a real run's)."""

from __future__ import annotations

import datetime as dt

import torch

from ds_doctor.collect.devicemap import Recorder
from ds_doctor.reports.model import (
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


#: what `equivalence[trainer-num-items-ws2]` noted on this machine (transformers 5.24.0): the route's loss is the
#: Trainer's over-counted one, 20 % below the reference's, at every step
TRAINER_NUM_ITEMS_STEPS = [
    {
        "loss": {"route": 3.861863851547241, "reference": 4.842654705047607},
        "grad_norm": {"route": 1.14735, "reference": 1.43874},
    },
    {
        "loss": {"route": 3.8728768825531006, "reference": 4.872329235076904},
        "grad_norm": {"route": 1.31296, "reference": 1.65179},
    },
    {
        "loss": {"route": 3.9259214401245117, "reference": 4.849667549133301},
        "grad_norm": {"route": 1.10578, "reference": 1.36596},
    },
    {
        "loss": {"route": 3.830474853515625, "reference": 4.851934909820557},
        "grad_norm": {"route": 1.15944, "reference": 1.46863},
    },
]


def an_equivalence_case(outcome: Outcome = Outcome.FAIL) -> CaseResult:
    finding = Finding(
        "equivalence",
        Severity.ERROR,
        "step 1 of 4: the loss diverges from the single-process fp32 reference by 0.203 relative",
        rank=0,
        stage="step 1",
        data={"step": 1, "quantity": "loss", "relative_error": 0.2025, "tolerance": 1.13e-06},
    )
    return case(
        outcome,
        "trainer-num-items",
        probe="equivalence",
        world_size=2,
        reason=finding.message,
        findings=(finding,),
        notes={
            "model": "hf:gpt2 (tiny), right-padded sequences of 2-8 tokens",
            "equivalence": {
                "tolerance": "16 x u(float32) x steps, relative",
                "steps": TRAINER_NUM_ITEMS_STEPS,
            },
        },
    )


def a_user_config_case() -> CaseResult:
    return case(
        Outcome.PASS,
        "user-config",
        probe="zero_offload",
        notes={
            "model": "hf:gpt2 (GPT2LMHeadModel, 0.12 M parameters)",
            "user_config": {
                "path": "/home/me/ds_config_zero3.json",
                "sha256": "9f2c4e1d7a0b" + "0" * 52,
                "config": {},
                "filled": {"train_micro_batch_size_per_gpu": 4, "optimizer.params.lr": 0.001},
                "changed": {
                    "zero_optimization.offload_optimizer.device": "nvme -> cpu: no NVMe path on this node"
                },
                "left_to_deepspeed": ["zero_optimization.reduce_bucket_size"],
            },
        },
    )

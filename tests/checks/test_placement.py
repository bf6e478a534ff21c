"""Each invariant with a planted fault on real tensors (meta is the second device), and a clean map."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ds_doctor.checks.placement import (
    ZeroPromise,
    boundary_grads,
    clip_norm_device,
    fp32_partition_placement,
    grad_accum_dtype,
    optimizer_state_colocation,
    param_partition_placement,
    zero_invariants,
)
from ds_doctor.collect.devicemap import Recorder, collect
from ds_doctor.probes.shared.models import build_mlp
from ds_doctor.probes.zero_offload import ZeroCase, build_config
from ds_doctor.reports.model import Severity, TensorRecord
from tests.conftest import build_engine, requires_deepspeed, train_one_step

OFFLOAD_BOTH = ZeroCase(3, "opt+param", "bf16")


def promise(params: ZeroCase, accelerator: str = "cpu") -> ZeroPromise:
    return ZeroPromise.from_config(build_config(params), accelerator=accelerator)


def test_promise_follows_the_config() -> None:
    both = promise(OFFLOAD_BOTH, accelerator="cuda:1")
    assert (both.optimizer_device, both.param_partition_device, both.offload_param) == ("cpu", "cpu", True)
    plain = promise(ZeroCase(2, "none", "fp32"), accelerator="cuda:1")
    assert (plain.optimizer_device, plain.offload_optimizer, plain.bf16) == ("cuda:1", False, False)
    nvme = ZeroPromise.from_config(
        {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}}, "cuda:0"
    )
    assert nvme.optimizer_device == "cpu"


def test_fp32_partition_off_the_offload_device_is_flagged_with_path_rank_stage() -> None:
    rec = Recorder(rank=1, stage="after_step")
    rec.add(torch.zeros(8), role="fp32_partition", path="optimizer.fp32_partitioned_groups_flat[0]")
    rec.add(
        torch.zeros(8, device="meta"), role="fp32_partition", path="optimizer.fp32_partitioned_groups_flat[1]"
    )
    findings = fp32_partition_placement(rec.records, promise(OFFLOAD_BOTH))
    assert len(findings) == 1
    finding = findings[0]
    assert (finding.invariant, finding.severity) == ("fp32_partition_placement", Severity.ERROR)
    assert (finding.rank, finding.stage) == (1, "after_step")
    assert [r.path for r in finding.evidence] == ["optimizer.fp32_partitioned_groups_flat[1]"]
    assert "fp32_partitioned_groups_flat[1] on meta" in finding.message and finding.expected == "cpu"


def test_param_partitions_must_be_offloaded_only_when_param_offload_is_on() -> None:
    rec = Recorder(0, "after_init")
    rec.add(
        torch.zeros(4, device="meta"), role="param_partition", path="0.weight.ds_tensor", owner="0.weight"
    )
    assert (
        param_partition_placement(rec.records, promise(OFFLOAD_BOTH))[0].evidence[0].path
        == "0.weight.ds_tensor"
    )
    assert param_partition_placement(rec.records, promise(ZeroCase(3, "opt", "bf16"), "meta")) == []


def boundary(grad: torch.Tensor | None, partition: torch.Tensor) -> list[TensorRecord]:
    init = Recorder(0, "after_init")
    init.add(partition, role="fp32_partition", path="p0")
    clip = Recorder(0, "at_clip")
    clip.add(partition, role="fp32_partition", path="p0")
    if grad is not None:
        clip.add(grad, role="fp32_partition_grad", path="p0.grad", owner="p0")
    return init.records + clip.records


def test_boundary_gradient_must_match_partition_device_numel_dtype() -> None:
    partition = torch.zeros(8)
    assert boundary_grads(boundary(torch.zeros(8), partition)) == []
    on_meta = boundary_grads(boundary(torch.zeros(8, device="meta"), partition))
    assert len(on_meta) == 1 and "device meta vs cpu" in on_meta[0].message
    shorter = boundary_grads(boundary(torch.zeros(7, dtype=torch.bfloat16), partition))
    assert "numel 7 vs 8" in shorter[0].message and "dtype bfloat16 vs float32" in shorter[0].message
    missing = boundary_grads(boundary(None, partition))
    assert "has no gradient" in missing[0].message


def test_a_partition_that_never_reaches_the_clip_is_flagged() -> None:
    init = Recorder(0, "after_init")
    init.add(torch.zeros(8), role="fp32_partition", path="p0")
    init.add(torch.zeros(8), role="fp32_partition", path="p1")
    clip = Recorder(0, "at_clip")
    clip.add(torch.zeros(8), role="fp32_partition", path="p0")
    clip.add(torch.zeros(8), role="fp32_partition_grad", path="p0.grad", owner="p0")
    findings = boundary_grads(init.records + clip.records)
    assert len(findings) == 1 and [r.path for r in findings[0].evidence] == ["p1"]


def test_optimizer_state_left_behind_when_parameters_move_is_flagged() -> None:
    model = build_mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 16)).sum().backward()
    optimizer.step()
    clean = collect(Recorder(0, "after_step"), module=model, optimizer=optimizer)
    assert optimizer_state_colocation(clean) == []
    # the parameter moves to another device (same object, so the optimizer still holds it); its state does not
    torch.utils.swap_tensors(model[0].weight, torch.nn.Parameter(torch.empty(32, 16, device="meta")))
    findings = optimizer_state_colocation(
        collect(Recorder(2, "after_load"), module=model, optimizer=optimizer)
    )
    assert len(findings) == 1
    paths = {r.path for r in findings[0].evidence}
    # exp_avg and exp_avg_sq are flagged; the 0-dim CPU `step` is exempt, as torch allows it anywhere
    assert paths == {"optimizer.state[0.weight].exp_avg", "optimizer.state[0.weight].exp_avg_sq", "0.weight"}
    assert (findings[0].rank, findings[0].stage) == (2, "after_load")


def test_group_tensors_left_on_cpu_are_flagged() -> None:
    model = build_mlp().to("meta")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    optimizer.param_groups[0]["running_d_numerator"] = torch.zeros(1)
    optimizer.param_groups[0]["running_d_denom"] = torch.zeros(1)
    findings = optimizer_state_colocation(
        collect(Recorder(0, "after_load"), module=model, optimizer=optimizer)
    )
    flagged = {r.path for r in findings[0].evidence if r.role == "optim_group_tensor"}
    assert flagged == {
        "optimizer.param_groups[0].running_d_numerator",
        "optimizer.param_groups[0].running_d_denom",
    }


def clip_call(norm: object, grad_device: str) -> list[TensorRecord]:
    rec = Recorder(0, "at_clip")
    rec.add(
        torch.zeros(8, device=grad_device), role="clip_operand", path="unscale_and_clip_grads[0].grads[0]"
    )
    rec.add(norm, role="clip_operand", path="unscale_and_clip_grads[0].total_norm")
    return rec.records


@pytest.mark.parametrize(
    ("norm", "grad_device", "flagged"),
    [
        (torch.tensor(2.0, device="meta"), "cpu", True),  # the S2 crash: accelerator norm, CPU grads
        (torch.tensor([2.0]), "meta", True),  # a 1-element (not 0-dim) CPU norm does not mix
        (torch.tensor(2.0), "meta", False),  # a 0-dim CPU tensor mixes with any device
        (2.0, "meta", False),  # a Python number
        (torch.tensor(2.0, device="meta"), "meta", False),  # same device
    ],
)
def test_clip_norm_device(norm, grad_device, flagged) -> None:
    findings = clip_norm_device(clip_call(norm, grad_device))
    assert bool(findings) is flagged
    if flagged:
        assert findings[0].evidence[0].path == "unscale_and_clip_grads[0].total_norm"


def test_bf16_without_fp32_accumulation_is_a_warning_only() -> None:
    assert [f.severity for f in grad_accum_dtype(promise(OFFLOAD_BOTH))] == [Severity.WARNING]
    config = {**build_config(OFFLOAD_BOTH), "data_types": {"grad_accum_dtype": "fp32"}}
    assert grad_accum_dtype(ZeroPromise.from_config(config, "cpu")) == []
    assert grad_accum_dtype(promise(ZeroCase(3, "opt+param", "fp32"))) == []


@requires_deepspeed
@pytest.mark.usefixtures("dist_group")
@pytest.mark.parametrize("params", [OFFLOAD_BOTH, ZeroCase(2, "opt", "fp32"), ZeroCase(1, "none", "fp32")])
def test_a_real_healthy_engine_yields_no_error_finding(params) -> None:
    engine = build_engine(params)
    try:
        records = collect(Recorder(0, "after_init"), engine=engine)
        train_one_step(engine, records.extend)
        records += collect(Recorder(0, "after_step"), engine=engine)
        findings = zero_invariants(records, promise(params))
        assert [f for f in findings if f.is_error] == []
        # the same map with the partition moved to meta (its Adam state left behind) is caught twice
        moved = [
            r
            if r.role != "fp32_partition" or r.stage != "after_step"
            else TensorRecord(**{**r.__dict__, "device": "meta"})
            for r in records
        ]
        assert sorted(f.invariant for f in zero_invariants(moved, promise(params)) if f.is_error) == [
            "fp32_partition_placement",
            "optimizer_state_colocation",
        ]
    finally:
        engine.destroy()


def test_a_zero_stage_built_as_another_optimizer_is_flagged() -> None:
    """(I6) DeepSpeed 0.17.6-0.18.4 built ZeRO-1 in bf16 with fp32 accumulation as the non-ZeRO fp16 wrapper
    (measured: FP16_UnfusedOptimizer on 0.18.4, BF16_Optimizer on 0.18.5)."""
    from ds_doctor.plugins.checks import BuiltOptimizer, zero_optimizer_built

    broken = BuiltOptimizer(
        stage=1,
        bf16=True,
        accumulate_fp32=True,
        cpu_offload=False,
        lineage=("FP16_UnfusedOptimizer", "object"),
    )
    (finding,) = zero_optimizer_built(broken, "z1 at 1 rank(s)")
    assert finding.stage == "initialize"
    assert "built FP16_UnfusedOptimizer, not BF16_Optimizer" in finding.message
    fixed = dataclasses.replace(broken, lineage=("BF16_Optimizer", "ZeROOptimizer", "object"))
    assert zero_optimizer_built(fixed, "z1") == []
    # the same stage offloaded, or accumulating in bf16, or stage 2 and 3: DeepSpeed's own ZeRO optimizers
    assert dataclasses.replace(broken, cpu_offload=True).routed() == "DeepSpeedZeroOptimizer"
    assert dataclasses.replace(broken, accumulate_fp32=False).routed() == "DeepSpeedZeroOptimizer"
    assert dataclasses.replace(broken, stage=2).routed() == "DeepSpeedZeroOptimizer"
    assert dataclasses.replace(broken, stage=3).routed() == "DeepSpeedZeroOptimizer_Stage3"
    # a class derived from the routed one is that stage's (ZenFlow's, SuperOffload's, read in 0.19.8)
    zenflow = dataclasses.replace(
        broken,
        accumulate_fp32=False,
        lineage=(
            "ZenFlowZeroOptimizerSequential",
            "ZenFlowZeroOptimizer",
            "DeepSpeedZeroOptimizer",
            "object",
        ),
    )
    assert zero_optimizer_built(zenflow, "z1") == []
    # stage 0's wrappers follow the precision and the optimizer's kind: nothing to hold them to
    assert zero_optimizer_built(dataclasses.replace(broken, stage=0), "z0") == []


@requires_deepspeed
@pytest.mark.usefixtures("dist_group")
@pytest.mark.parametrize(
    ("stage", "accumulate"), [(1, "fp32"), (1, "bf16"), (2, "fp32"), (3, "fp32")], ids=lambda v: str(v)
)
def test_the_installed_deepspeed_builds_the_optimizer_its_zero_stage_routes_to(
    stage: int, accumulate: str
) -> None:
    """(I6) on a real engine of the installed release: what the invariant expects is what DeepSpeed builds, so the
    matrix's settings raise no false alarm (0.19.8: BF16_Optimizer for ZeRO-1 with fp32 accumulation)."""
    import deepspeed

    from ds_doctor.plugins.checks import BuiltOptimizer, zero_optimizer_built

    model = build_mlp()
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": stage},
        "data_types": {"grad_accum_dtype": accumulate},
    }
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3), config=config
    )
    try:
        built = BuiltOptimizer.of(engine)
        assert built.stage == stage and built.accumulate_fp32 == (accumulate == "fp32")
        assert zero_optimizer_built(built, f"z{stage}") == [], built
    finally:
        engine.destroy()

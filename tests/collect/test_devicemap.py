"""Collectors on real torch and DeepSpeed objects; the meta device stands in for a second device."""

from __future__ import annotations

import pytest
import torch

from ds_doctor.collect.devicemap import (
    Recorder,
    TensorRecord,
    collect,
    collect_optimizer,
    parameter_names,
    select,
)
from ds_doctor.probes.shared.models import build_mlp
from ds_doctor.probes.zero_offload import ZeroCase
from tests.conftest import build_engine, requires_deepspeed, train_one_step


def stepped_adamw() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = build_mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 16)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_module_and_optimizer_records_carry_placement_metadata() -> None:
    model, optimizer = stepped_adamw()
    records = collect(Recorder(rank=3, stage="after_step"), module=model, optimizer=optimizer)
    params = select(records, role="param")
    assert [r.path for r in params] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    weight = params[0]
    assert (weight.rank, weight.stage, weight.device, weight.dtype) == (3, "after_step", "cpu", "float32")
    assert weight.shape == (32, 16) and weight.numel == 512 and weight.nbytes == 2048
    assert len(select(records, role="grad")) == 4
    states = select(records, role="optim_state", owner="0.weight")
    assert sorted(r.path for r in states) == [
        "optimizer.state[0.weight].exp_avg",
        "optimizer.state[0.weight].exp_avg_sq",
        "optimizer.state[0.weight].step",
    ]
    step = next(r for r in states if r.path.endswith("step"))
    assert step.shape == () and step.is_cpu_scalar


def test_tensors_nested_in_param_groups_are_recorded_with_the_first_param_as_owner() -> None:
    model, optimizer = stepped_adamw()
    group = optimizer.param_groups[0]
    group["running_d_denom"] = torch.zeros(1)
    group["extra"] = {"pair": [torch.ones(2), 3.0]}
    records = collect(Recorder(0, "after_load"), module=model, optimizer=optimizer)
    group_tensors = {r.path: r for r in select(records, role="optim_group_tensor")}
    assert set(group_tensors) == {
        "optimizer.param_groups[0].running_d_denom",
        "optimizer.param_groups[0].extra.pair[0]",
    }
    assert all(r.owner == "0.weight" for r in group_tensors.values())


def test_meta_parameters_are_recorded_on_meta_without_touching_data() -> None:
    model = build_mlp().to("meta")
    records = collect(Recorder(0, "after_init"), module=model)
    assert {r.device for r in records} == {"meta"}
    assert sum(r.numel for r in records) == sum(p.numel() for p in model.parameters())


def test_state_of_a_tensor_no_group_holds_is_still_recorded() -> None:
    model, optimizer = stepped_adamw()
    orphan = torch.zeros(3)
    optimizer.state[orphan] = {"exp_avg": torch.zeros(3)}
    rec = Recorder(0, "s")
    collect_optimizer(rec, optimizer, parameter_names(model))
    assert any("untracked" in r.path for r in rec.records)


def test_record_round_trips_through_json_dict() -> None:
    record = TensorRecord(1, "after_step", "fp32_partition", "p", None, "cpu", "float32", (4,), 4, 16, True)
    assert TensorRecord.from_dict(record.to_dict()) == record


@requires_deepspeed
@pytest.mark.usefixtures("dist_group")
@pytest.mark.parametrize(
    ("stage", "offload", "dtype", "partition_attr"),
    [
        (1, "none", "bf16", "single_partition_of_fp32_groups"),
        (2, "opt", "fp32", "single_partition_of_fp32_groups"),
        (3, "none", "fp32", "fp32_partitioned_groups_flat"),
        (3, "opt+param", "bf16", "fp32_partitioned_groups_flat"),
    ],
)
def test_zero_collector_reads_partitions_state_and_clip_operands(
    stage, offload, dtype, partition_attr
) -> None:
    engine = build_engine(ZeroCase(stage, offload, dtype))
    try:
        clip_records: list[TensorRecord] = []
        calls = train_one_step(engine, clip_records.extend)
        records = collect(Recorder(0, "after_step"), engine=engine)
        partitions = select(records, role="fp32_partition")
        assert [r.path for r in partitions] == [f"optimizer.{partition_attr}[0]"]
        assert partitions[0].dtype == "float32" and partitions[0].numel >= 676
        states = select(records, role="optim_state")
        assert {r.owner for r in states} == {partitions[0].path}
        assert {r.path.rsplit(".", 1)[1] for r in states} >= {"exp_avg", "exp_avg_sq"}
        low = "bfloat16" if dtype == "bf16" else "float32"
        assert {r.dtype for r in select(records, role="param")} == {low}
        if stage == 3:
            assert len(select(records, role="param_partition")) == 4
        if offload != "none" and stage < 3:
            assert select(records, role="grad_buffer")  # accumulated_grads_in_cpu
        assert calls == 1
        operands = {r.path: r for r in clip_records if r.role == "clip_operand"}
        assert set(operands) == {
            "unscale_and_clip_grads[0].grads[0]",
            "unscale_and_clip_grads[0].total_norm",
            "unscale_and_clip_grads[0].loss_scale",
        }
        assert operands["unscale_and_clip_grads[0].grads[0]"].owner == partitions[0].path
        grads = [r for r in clip_records if r.role == "fp32_partition_grad"]
        assert grads and grads[0].numel == partitions[0].numel
    finally:
        engine.destroy()

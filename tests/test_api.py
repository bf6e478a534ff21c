"""`ds_doctor.api.inspect`, as a user calls it inside a training job."""

from __future__ import annotations

import gc
import json
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from ds_doctor.api import Inspection, inspect
from ds_doctor.checks.placement import (
    ZeroPromise,
    fp32_partition_placement,
    grad_accum_dtype,
    optimizer_state_colocation,
    param_partition_placement,
)
from ds_doctor.collect.devicemap import Recorder, collect
from ds_doctor.probes.shared.models import build_mlp
from ds_doctor.probes.zero_offload import ZeroCase
from ds_doctor.reports.model import Finding, TensorRecord
from ds_doctor.watch.target import engine_config
from tests.conftest import build_engine, requires_deepspeed, train_one_step


def test_inspect_flags_state_left_behind_and_writes_a_file(tmp_path: Path) -> None:
    model = build_mlp()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 16)).sum().backward()
    optimizer.step()
    assert inspect(model, optimizer).ok
    torch.utils.swap_tensors(model[2].bias, torch.nn.Parameter(torch.empty(4, device="meta")))
    result = inspect(model, optimizer, stage="after_load")
    assert not result.ok and result.findings[0].invariant == "optimizer_state_colocation"
    data = json.loads(result.write(tmp_path / "inspect.json").read_text())
    assert {r["path"] for r in data["findings"][0]["evidence"]} >= {"optimizer.state[2.bias].exp_avg"}


def inspected_before(
    model: Any = None,
    optimizer: Any = None,
    *,
    engine: Any = None,
    stage: str = "inspect",
    config: Mapping[str, Any] | None = None,
    accelerator: str | None = None,
) -> tuple[tuple[TensorRecord, ...], tuple[Finding, ...]]:
    """What `inspect` computed before issue 38: every record, then the invariants of ds_doctor.checks over all."""
    records = collect(Recorder(0, stage), module=model, optimizer=optimizer, engine=engine)
    findings = optimizer_state_colocation(records)
    config = config if config is not None else (engine_config(engine) if engine is not None else None)
    if config is not None and "zero_optimization" in config:
        device = accelerator or (str(engine.device) if engine is not None else "cpu")
        promise = ZeroPromise.from_config(config, accelerator=device)
        findings += fp32_partition_placement(records, promise)
        findings += param_partition_placement(records, promise)
        findings += grad_accum_dtype(promise)
    return tuple(records), tuple(findings)


def same_as_before(**given: Any) -> Inspection:
    """`inspect(**given)`, held to the full computation: the same findings, the same records."""
    records, findings = inspected_before(**given)
    result = inspect(**given)
    assert result.findings == findings
    assert result.records == records
    return result


class Tied(torch.nn.Module):
    """An LM's shape in small: the head shares the embedding; a buffer scales the hidden state."""

    scale: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(32, 8)
        self.block = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 32, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.full((8,), 0.5))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.block(self.embed(ids))) * self.scale)


def trained() -> tuple[Tied, torch.optim.Optimizer]:
    model = Tied()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randint(0, 32, (2, 5))).sum().backward()
    optimizer.step()
    return model, optimizer


class Zero12:
    """What ds-doctor reads of a DeepSpeed ZeRO-1/2 optimizer: one fp32 partition (with its gradient), the bf16
    flat group, and the inner AdamW stepping the partition."""

    def __init__(self, partition_device: str, state_device: str = "cpu") -> None:
        partition = torch.zeros(8, device=partition_device)
        partition.grad = torch.zeros(8, device=partition_device)
        self.single_partition_of_fp32_groups = [partition]
        self.bit16_groups_flat = [torch.zeros(8, dtype=torch.bfloat16)]
        self.optimizer = torch.optim.AdamW([partition], lr=1e-3)
        self.optimizer.state[partition] = {
            "step": torch.tensor(1.0),
            "exp_avg": torch.zeros(8, device=state_device),
            "exp_avg_sq": torch.zeros(8, device=state_device),
        }
        self.param_groups = self.optimizer.param_groups


OFFLOAD = {
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "bf16": {"enabled": True},
}


def test_the_findings_are_those_of_every_record_on_healthy_and_broken_jobs() -> None:
    """`inspect` judges rows and makes records of the offenders only; on each case (meta as the real second
    device) its findings and records equal the full computation's, offenders, evidence and order alike."""
    model, optimizer = trained()
    assert same_as_before(model=model, optimizer=optimizer).findings == ()
    # a state tensor left on another device than its parameter; the 0-dim CPU step stays exempt
    optimizer.state[model.block.weight]["exp_avg"] = torch.zeros(8, 8, device="meta")
    # a tensor kept in a param group (not exempt), and state nested in a list
    optimizer.param_groups[0]["running_d"] = torch.zeros((), device="meta")
    optimizer.state[model.block.bias]["history"] = [torch.zeros(2), torch.zeros(2, device="meta")]
    broken = same_as_before(model=model, optimizer=optimizer, stage="after_load")
    [finding] = broken.findings
    assert finding.invariant == "optimizer_state_colocation" and "3 optimizer tensor(s)" in finding.message
    # the parameter moved instead (the tied embedding: one record, two names); its state stayed on CPU
    model, optimizer = trained()
    torch.utils.swap_tensors(model.embed.weight, torch.nn.Parameter(torch.zeros(32, 8, device="meta")))
    assert not same_as_before(model=model, optimizer=optimizer).ok
    # a Python number among the rows (a buffer some library wrote into the dict)
    model._buffers["count"] = 3  # type: ignore[assignment]
    assert "python" in {r.device for r in same_as_before(model=model, optimizer=optimizer).records}


def test_names_that_clash_with_the_optimizers_own_are_anchors_on_rows_as_on_records() -> None:
    """An optimizer tensor of a parameter the module no longer holds is named by its place in the groups; a module
    parameter of that very name is then its anchor. A group without parameters owns its tensors as no one, which
    a device map looks up as the empty name: a parameter registered under it (through the dict) anchors them."""
    holder = torch.nn.Module()
    holder.register_parameter("params[1]", torch.nn.Parameter(torch.zeros(2, device="meta")))
    model = torch.nn.Module()
    model.optimizer = torch.nn.ModuleDict({"param_groups[0]": holder})
    orphan = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.AdamW([holder.get_parameter("params[1]"), orphan], lr=1e-3)
    optimizer.state[orphan] = {"exp_avg": torch.zeros(2)}
    [finding] = same_as_before(model=model, optimizer=optimizer).findings
    assert "optimizer.state[optimizer.param_groups[0].params[1]].exp_avg on cpu" in finding.message
    model._parameters[""] = torch.nn.Parameter(torch.zeros(1, device="meta"))
    optimizer.param_groups.append({"params": [], "running": torch.zeros(1)})
    assert len(same_as_before(model=model, optimizer=optimizer).findings[0].evidence) == 4


def test_a_zero_promise_is_held_to_the_partitions_as_before() -> None:
    """fp32 partitions against the ZeRO config's offload device (with the inner state anchored to them), ZeRO-3
    parameter partitions against offload_param, the bf16 accumulation warning."""
    model = build_mlp()
    healthy = same_as_before(model=model, optimizer=Zero12("cpu"), config=OFFLOAD, accelerator="cpu")
    assert [f.invariant for f in healthy.findings] == ["grad_accum_dtype"]
    wrong = same_as_before(model=model, optimizer=Zero12("meta"), config=OFFLOAD, accelerator="cpu")
    assert [f.invariant for f in wrong.findings] == [
        "optimizer_state_colocation",
        "fp32_partition_placement",
        "grad_accum_dtype",
    ]
    assert "optimizer.single_partition_of_fp32_groups[0] on meta" in wrong.findings[1].message
    for param in model.parameters():  # ZeRO-3 partitions, one of them on the wrong device
        param.ds_tensor = torch.zeros(param.numel() // 2, device="meta" if param.dim() == 1 else "cpu")
    zero3 = {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
    offload = same_as_before(model=model, optimizer=torch.optim.AdamW(model.parameters()), config=zero3)
    assert [f.invariant for f in offload.findings] == ["param_partition_placement"]
    assert "2 parameter partition(s) not on cpu" in offload.findings[0].message


def test_records_are_what_inspect_saw_and_it_keeps_no_tensor() -> None:
    """The records are made on first access, from metadata read at `inspect`: a job that later changes a dtype or
    requires_grad, or drops its gradients, changes neither them nor its memory (no tensor is kept alive)."""
    model, optimizer = trained()
    records, _ = inspected_before(model=model, optimizer=optimizer)
    result = inspect(model, optimizer)
    grad = weakref.ref(model.block.weight.grad)
    optimizer.zero_grad(set_to_none=True)
    model.to(torch.float64)
    model.block.requires_grad_(False)
    gc.collect()
    assert grad() is None
    assert result.records == records and result.records is result.records  # made once
    assert result == Inspection(records, result.findings) and hash(result) == hash(Inspection(records, ()))
    with pytest.raises(AttributeError):
        result.findings = ()


@requires_deepspeed
@pytest.mark.usefixtures("dist_group")
def test_inspect_reads_the_zero_promise_from_the_engine() -> None:
    engine = build_engine(ZeroCase(3, "opt+param", "bf16"))
    try:
        train_one_step(engine)
        result = same_as_before(engine=engine, stage="after_step")
        assert result.ok and [f.invariant for f in result.findings] == ["grad_accum_dtype"]
        assert {r.device for r in result.records if r.role == "fp32_partition"} == {"cpu"}
        claimed = same_as_before(
            engine=engine,
            accelerator="cpu",
            config={"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "meta"}}},
        )
        assert "fp32_partition_placement" in [f.invariant for f in claimed.findings]
    finally:
        engine.destroy()

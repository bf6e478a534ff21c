"""Buffers and tied weights in the device map, and the invariants on them, over a real ZeRO-3 engine (one rank):
the tie and the buffers recorded, a planted untie and a planted buffer left on `meta` caught with their names."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ds_doctor.checks.structure import buffer_placement, ties_kept
from ds_doctor.collect.devicemap import Recorder, collect
from ds_doctor.reports.model import TensorRecord
from tests.conftest import requires_deepspeed
from tests.resources.user_models import tied_with_buffers

CONFIG = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 10**9,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu"},
        "offload_param": {"device": "cpu"},
    },
}


def snapshot(stage: str, **given: Any) -> list[TensorRecord]:
    return collect(Recorder(0, stage), **given)


def test_a_tie_is_one_record_with_both_names_and_buffers_are_recorded() -> None:
    records = snapshot("built", module=tied_with_buffers())
    params = {r.path: r for r in records if r.role == "param"}
    assert params["embed.weight"].aliases == ("head.weight",) and "head.weight" not in params
    buffers = {r.path: r for r in records if r.role == "buffer"}
    assert set(buffers) == {"scale", "positions"} and buffers["scale"].owner is None
    assert ties_kept(records, "built", "built") == [] and buffer_placement(records, "cpu", "built") == []


@requires_deepspeed
def test_zero3_keeps_the_tie_and_the_planted_faults_are_named(dist_group: None) -> None:
    import deepspeed

    model = tied_with_buffers()
    before = snapshot("before_init", module=model)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=CONFIG)
    try:
        healthy = before + snapshot("after_init", engine=engine)
        assert ties_kept(healthy, "before_init", "after_init") == []
        assert buffer_placement(healthy, "cpu", "after_init") == []
        # planted: a copy assigned to the head after initialize (the tie is gone), a buffer left on meta
        engine.module.head.weight = torch.nn.Parameter(engine.module.embed.weight.detach().clone())
        engine.module.register_buffer("scale", torch.empty(8, device="meta"))
        broken = before + snapshot("after_init", engine=engine)
        [untied] = ties_kept(broken, "before_init", "after_init")
        assert untied.invariant == "ties_kept" and "embed.weight and head.weight" in untied.message
        assert {r.path for r in untied.evidence} == {"embed.weight", "head.weight"}
        [meta] = buffer_placement(broken, "cpu", "after_init")
        assert (
            meta.invariant == "buffer_placement"
            and "buffer scale" in meta.message
            and "on meta" in meta.message
        )
    finally:
        engine.destroy()


@pytest.mark.parametrize(
    ("device", "expected", "ok"),
    [
        ("cuda:0", "cuda:0", True),
        ("cuda:1", "cuda:0", False),
        ("cuda", "cuda:0", True),
        ("cpu", "cuda:0", False),
    ],
)
def test_a_buffer_on_another_device_than_the_model(device: str, expected: str, ok: bool) -> None:
    record = TensorRecord(
        0,
        "after_init",
        "buffer",
        "model.rotary_emb.inv_freq",
        "model.rotary_emb",
        device,
        "float32",
        (4,),
        4,
        16,
    )
    found = buffer_placement([record], expected, "after_init")
    assert (found == []) is ok
    if not ok:
        assert "model.rotary_emb.inv_freq of model.rotary_emb" in found[0].message

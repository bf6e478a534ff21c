"""S1 identity invariants with planted faults: real DeepSpeed engines, real accelerate routes, meta tensors."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ds_doctor.checks.identity import (
    held_parameters,
    identity_invariants,
    no_meta_params,
    optimizer_params_live,
    param_name_map,
)
from ds_doctor.collect.devicemap import Recorder, collect
from ds_doctor.probes.frozen_param_names import build_config, meta_entries
from ds_doctor.probes.shared.common import full_values
from ds_doctor.probes.shared.models import build_frozen_model
from ds_doctor.reports.model import Severity
from tests.conftest import requires_accelerate, requires_deepspeed


def engine_for(stage: int) -> Any:
    import deepspeed

    model = build_frozen_model()
    trainable = [p for p in model.parameters() if p.requires_grad]
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=trainable, config=build_config(stage)
    )
    return engine


def records_of(module: Any, stage: str = "before_save") -> list:
    return collect(Recorder(0, stage), module=module)


@requires_deepspeed
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_fresh_engine_satisfies_every_identity_invariant(dist_group: None, stage: int) -> None:
    engine = engine_for(stage)
    try:
        named = list(engine.module.named_parameters())
        held = held_parameters(engine.optimizer)
        # module objects, not copies
        assert {id(p) for p in held} == {id(p) for _, p in named if p.requires_grad}
        assert (
            identity_invariants(named, engine, records_of(engine.module), rank=0, stage="before_save") == []
        )
    finally:
        engine.destroy()


@requires_deepspeed
@requires_accelerate
def test_set_module_tensor_to_device_breaks_the_name_map(dist_group: None) -> None:
    from accelerate.utils import set_module_tensor_to_device

    engine = engine_for(2)
    try:
        old = engine.module.emb.weight
        set_module_tensor_to_device(engine.module, "emb.weight", "cpu", value=old.detach().clone())
        assert engine.module.emb.weight is not old  # the route really replaced the object
        findings = param_name_map(
            list(engine.module.named_parameters()), engine.param_names, rank=0, stage="s"
        )
        assert [(f.invariant, f.severity) for f in findings] == [("param_name_map", Severity.ERROR)]
        assert findings[0].message.startswith("emb.weight (frozen) is not a key of engine.param_names")
        assert findings[0].evidence[0].path == "emb.weight" and findings[0].remedy
        # ...and the save DeepSpeed then attempts fails the way the finding said it would
        with pytest.raises(ValueError, match="failed to find frozen"):
            engine._get_zero_frozen_param_attributes(engine._get_param_shape_func)
        # rebuilding the map (the remedy) satisfies the invariant again
        engine.param_names = {p: n for n, p in engine.module.named_parameters()}
        assert (
            param_name_map(list(engine.module.named_parameters()), engine.param_names, rank=0, stage="s")
            == []
        )
    finally:
        engine.destroy()


def test_a_name_map_under_the_wrong_name_and_a_missing_map() -> None:
    model = build_frozen_model()
    named = list(model.named_parameters())
    swapped = {p: n for n, p in named}
    swapped[model.head.weight], swapped[model.head.bias] = "head.bias", "head.weight"
    findings = param_name_map(named, swapped, rank=1, stage="s")
    assert sorted(f.evidence[0].path for f in findings) == ["head.bias", "head.weight"]
    assert all("under another name" in f.message and f.rank == 1 for f in findings)
    assert [f.severity for f in param_name_map(named, None, rank=0, stage="s")] == ["info"]


def test_load_state_dict_assign_leaves_the_optimizer_with_orphans() -> None:
    model = build_frozen_model()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    assert (
        optimizer_params_live(list(model.named_parameters()), held_parameters(optimizer), rank=0, stage="s")
        == []
    )
    model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()}, assign=True)
    findings = optimizer_params_live(
        list(model.named_parameters()), held_parameters(optimizer), rank=0, stage="s"
    )
    orphans = [f for f in findings if "no longer a parameter" in f.message]
    untracked = sorted(f.evidence[0].path for f in findings if "will not train" in f.message)
    # the frozen emb is not expected in it
    assert len(orphans) == 2 and untracked == ["head.bias", "head.weight"]


@requires_deepspeed
@requires_accelerate
def test_dispatch_to_disk_puts_a_meta_parameter_where_the_save_reads(dist_group: None, tmp_path: Any) -> None:
    from accelerate import dispatch_model

    engine = engine_for(0)
    try:
        dispatch_model(
            engine.module, device_map={"emb": "disk", "head": "cpu"}, offload_dir=str(tmp_path / "off")
        )
        records = records_of(engine.module)
        findings = no_meta_params(records)
        assert [(f.invariant, f.evidence[0].path, f.evidence[0].device) for f in findings] == [
            ("no_meta_params", "emb.weight", "meta")
        ]
        engine.save_checkpoint(str(tmp_path / "ckpt"), tag="t")  # stage 0 saves without a word...
        # ...no data
        assert meta_entries(tmp_path / "ckpt" / "t") == ["mp_rank_00_model_states.pt:module.emb.weight"]
    finally:
        engine.destroy()


def test_no_meta_params_passes_real_parameters_and_flags_only_meta() -> None:
    model = build_frozen_model()
    assert no_meta_params(records_of(model)) == []
    model.head.to("meta")
    assert sorted(f.evidence[0].path for f in no_meta_params(records_of(model))) == [
        "head.bias",
        "head.weight",
    ]


@requires_deepspeed
def test_full_values_gathers_zero3_partitions(dist_group: None) -> None:
    reference = {n: p.detach().clone() for n, p in build_frozen_model().named_parameters()}
    engine = engine_for(3)
    try:
        assert engine.module.emb.weight.numel() == 0  # a ZeRO-3 placeholder outside a gather
        values = full_values(engine.module)
        assert all(torch.equal(values[n], reference[n]) for n in reference)
    finally:
        engine.destroy()

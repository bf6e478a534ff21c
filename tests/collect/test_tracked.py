"""S3's collector: what an optimizer tracks, mapped back to original names through real FSDP1 (orig and flat),
FSDP2 and DeepSpeed wrappers on a one-rank gloo group."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ds_doctor.checks.coverage import tracked_live, tracked_set
from ds_doctor.collect.tracked import clean_name, optimizer_groups, tracked_names
from ds_doctor.probes.coverage.subject import FROZEN, INTENDED, build_model, make_optimizer
from tests.conftest import requires_deepspeed

BEFORE = {name: 0 for name in INTENDED}


def names_after(module: Any, optimizer: Any) -> Any:
    return tracked_names(optimizer_groups(optimizer), module)


def test_clean_name_strips_wrapper_prefixes() -> None:
    assert clean_name("_fsdp_wrapped_module.a._fsdp_wrapped_module.weight") == "a.weight"
    assert clean_name("_orig_mod.head.bias") == "head.bias"


def test_the_unwrapped_reference_tracks_a_and_head_in_one_group() -> None:
    model = build_model()
    tracked = names_after(model, make_optimizer(model))
    assert tracked.groups == BEFORE and tracked.orphans == []


@pytest.mark.parametrize("orig", [True, False])
def test_fsdp1_names_map_back_through_identity_and_flat_fqns(dist_group: None, orig: bool) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    wrapped = FSDP(
        build_model(),
        auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}),
        use_orig_params=orig,
        device_id=torch.device("cpu"),
    )
    tracked = names_after(wrapped, make_optimizer(wrapped))
    assert tracked.groups == BEFORE and tracked.orphans == []
    assert tracked_set(BEFORE, tracked.groups, FROZEN) == [] and tracked_live(tracked) == []


def test_fsdp1_flat_with_the_optimizer_built_first_holds_orphans(dist_group: None) -> None:
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    model = build_model()
    optimizer = make_optimizer(model)  # the wrong order
    wrapped = FSDP(
        model,
        auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}),
        use_orig_params=False,
        device_id=torch.device("cpu"),
    )
    tracked = names_after(wrapped, optimizer)
    assert tracked.groups == {} and sorted(shape for _, shape in tracked.orphans) == [
        (4,),
        (4, 8),
        (8,),
        (8, 8),
    ]
    assert [f.invariant for f in tracked_live(tracked)] == ["tracked_live"] * 4
    assert sorted(f.message.split(" ")[0] for f in tracked_set(BEFORE, tracked.groups, FROZEN)) == sorted(
        INTENDED
    )


def test_fsdp2_dtensor_parameters_keep_their_names(dist_group: None) -> None:
    from torch.distributed.fsdp import fully_shard

    model = build_model()
    stale = make_optimizer(model)
    for part in ("a", "b", "c", "head"):
        fully_shard(getattr(model, part))
    fully_shard(model)
    assert names_after(model, make_optimizer(model)).groups == BEFORE
    # built before fully_shard: plain tensors, no longer used
    assert len(names_after(model, stale).orphans) == 4


@requires_deepspeed
@pytest.mark.parametrize("stage", [0, 2, 3])
def test_deepspeed_groups_hold_the_modules_own_parameters(dist_group: None, stage: int) -> None:
    import deepspeed

    model = build_model()
    config = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": stage}}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=make_optimizer(model), config=config)
    try:
        tracked = names_after(engine.module, engine.optimizer)
        assert tracked.groups == BEFORE and tracked.orphans == []
    finally:
        engine.destroy()

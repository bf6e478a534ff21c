"""zero3_hooks_own_state on real ZeRO-3 engines: a wrapper that delegates attribute lookups to a child keeps its
own hook state on a DeepSpeed that has the fix, and one that reads the child's (as every DeepSpeed before 0.19.3
left it) is named."""

from __future__ import annotations

import pytest

from ds_doctor.checks.structure import zero3_hooks_own_state
from ds_doctor.probes.zero3_hooks import build_model
from tests.conftest import requires_deepspeed


def engine_for(delegates: bool):
    import deepspeed
    import torch

    model = build_model(delegates)
    trainable = [p for p in model.parameters() if p.requires_grad]
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "zero_optimization": {"stage": 3},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,
    }
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=torch.optim.AdamW(trainable, lr=1e-3), config=config
    )
    return engine


@requires_deepspeed
@pytest.mark.parametrize("delegates", [False, True])
def test_each_hooked_module_holds_its_own_state_here(dist_group: None, delegates: bool) -> None:
    engine = engine_for(delegates)
    try:
        assert zero3_hooks_own_state(engine.module, 0) == []
        wrapper = engine.module[2]
        assert "post_bwd_fn" in vars(wrapper) and "post_bwd_fn" in vars(wrapper.original_module)
        # what DeepSpeed < 0.19.3 left: the wrapper's own state missing, the child's read through it
        if delegates:
            del wrapper.__dict__["post_bwd_fn"], wrapper.__dict__["pre_bwd_fn"]
            (finding,) = zero3_hooks_own_state(engine.module, 0)
            assert finding.invariant == "zero3_hooks_own_state" and finding.message.startswith(
                "2 (ModulesToSave) has no ZeRO-3 hook state of its own: pre_bwd_fn, post_bwd_fn"
            )
            assert "0.19.3" in finding.remedy
    finally:
        engine.destroy()

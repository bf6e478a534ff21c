"""`--model`: the specs, the factories' shapes, the loss rule, and what is refused with one line."""

from __future__ import annotations

import pytest
import torch

from ds_doctor.usersetup.model import HF_TESTED, ModelSpec, ModelSpecError, build, check, loss_of


@pytest.mark.parametrize("model_type", HF_TESTED)
def test_every_tested_architecture_builds_tiny_and_trains_one_step(model_type: str) -> None:
    trainable = build(check(f"hf:{model_type}"))
    assert sum(p.numel() for p in trainable.module.parameters()) < 100_000  # tiny, and the real classes
    assert type(trainable.module).__name__.endswith(("ForCausalLM", "LMHeadModel"))
    loss = trainable.loss(trainable.module, 2, device="cpu", dtype=torch.float32, seed=0)
    loss.backward()
    assert loss.dim() == 0 and all(
        p.grad is not None for p in trainable.module.parameters() if p.requires_grad
    )


@pytest.mark.parametrize("model_type", HF_TESTED)
def test_every_tiny_architecture_saves_and_loads_back(model_type: str, tmp_path) -> None:
    """A Trainer's checkpoint is save_pretrained: a tiny config has to be a valid one (qwen3's layer_types were
    sized for its default 32 layers, and transformers refused to save it)."""
    from transformers import AutoModelForCausalLM

    module = build(check(f"hf:{model_type}")).module
    module.save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert loaded.config.num_hidden_layers == module.config.num_hidden_layers == 2
    saved, back = module.state_dict(), loaded.state_dict()
    assert saved.keys() == back.keys() and all(torch.equal(saved[key], back[key]) for key in saved)


def test_factories_with_and_without_world_size_and_with_their_own_batches() -> None:
    assert (
        build(ModelSpec.parse("tests.resources.user_models:sized"), world_size=3).module[1].out_features == 11
    )
    images = build(check("tests.resources.user_models:images"))
    assert images.loss(images.module, 2, device="cpu", dtype=torch.float32, seed=1).dim() == 0
    tied = build(check("tests.resources.user_models:tied_with_buffers"))
    assert tied.module.head.weight is tied.module.embed.weight


def test_the_loss_rule() -> None:
    class Out(dict):
        pass

    assert loss_of(torch.tensor(2.0)).item() == 2.0
    assert loss_of(torch.ones(3)).item() == 3.0
    assert loss_of(Out(loss=torch.tensor(5.0), logits=torch.ones(2))).item() == 5.0
    assert loss_of((torch.ones(2), torch.zeros(1))).item() == 2.0


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("hf:not_a_model", "not a causal-LM model type of transformers; tested: qwen3"),
        ("nothing", "expected hf:<model_type>"),
        ("tests.resources.nope:factory", "does not import: ModuleNotFoundError"),
        ("tests.resources.user_models:missing", "does not import: AttributeError"),
        ("tests.resources.user_models:not_a_module", "the factory returned dict, not an nn.Module"),
    ],
)
def test_a_bad_spec_is_one_line(spec: str, needle: str) -> None:
    with pytest.raises(ModelSpecError) as caught:
        check(spec)
    assert needle in str(caught.value) and "\n" not in str(caught.value)

"""`--deepspeed-config`: a user's config read, validated by DeepSpeed, and made runnable here with every fill and
change listed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ds_doctor.usersetup.deepspeed_config import ConfigError, check, fill, load
from tests.conftest import requires_deepspeed

AUTO = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "nvme", "nvme_path": "/no/such/nvme"},
        "reduce_bucket_size": "auto",
        "sub_group_size": "auto",
    },
}


def test_auto_values_are_filled_and_every_change_is_listed() -> None:
    filled = fill(AUTO, world_size=2, accelerator="cpu")
    config = filled.config
    assert (
        config["train_micro_batch_size_per_gpu"],
        config["gradient_accumulation_steps"],
        config["train_batch_size"],
    ) == (2, 4, 16)
    assert config["bf16"]["enabled"] is True and config["optimizer"]["params"]["lr"] == 3e-4
    assert filled.filled["zero_optimization.reduce_bucket_size"] == 1024
    assert (
        filled.unfilled == ["zero_optimization.sub_group_size"]
        and "sub_group_size" not in config["zero_optimization"]
    )
    assert config["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert "'/no/such/nvme' does not exist" in filled.changed["zero_optimization.offload_param.device"]
    assert filled.changed["zero_optimization.offload_optimizer.pin_memory"].startswith("true -> false")
    assert AUTO["zero_optimization"]["offload_param"]["device"] == "nvme"  # the user's dict is left as it was


def test_a_fixed_batch_for_another_world_size_is_recomputed_and_said() -> None:
    filled = fill(
        {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8},
        world_size=2,
        accelerator="cpu",
    )
    assert filled.config["train_batch_size"] == 64 and filled.changed["train_batch_size"].startswith(
        "256 -> 64"
    )


def test_an_existing_nvme_path_is_kept(tmp_path: Path) -> None:
    config = {
        "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": str(tmp_path)}}
    }
    assert fill(config, 1, "cpu").changed == {}


def test_a_trainer_style_config_without_an_optimizer_gets_the_trainers_and_says_so() -> None:
    import torch

    from ds_doctor.usersetup.deepspeed_config import route_optimizer, trainer_optimizer

    filled = fill({"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 2}, 1, "cpu")
    assert filled.changed == {}  # fill alone leaves it: a route that passes its own optimizer needs nothing
    trainer_optimizer(filled)
    # as transformers' deepspeed_optim_sched sets it
    assert filled.config["zero_allow_untested_optimizer"] is True
    said = filled.changed["optimizer"]
    assert said.startswith("(none) -> torch.optim.AdamW(lr=5e-05") and 'add an "optimizer" block' in said
    optimizer = route_optimizer(filled.config, torch.nn.Linear(2, 2).parameters())
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["lr"] == 5e-5
    assert route_optimizer(AUTO, torch.nn.Linear(2, 2).parameters()) is None  # the config's own is used
    with_one = fill(AUTO, 1, "cpu")
    trainer_optimizer(with_one)
    assert "optimizer" not in with_one.changed and "zero_allow_untested_optimizer" not in with_one.config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ds.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (
            '{"train_batch_size": 8,\n  "zero_optimization": {"stage": 3,}\n}',
            "not JSON: Expecting property name",
        ),
        ("[1, 2]", "a DeepSpeed config is a JSON object, not list"),
    ],
)
def test_a_file_that_is_no_config_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(write(tmp_path, text))
    assert needle in str(caught.value)
    if "JSON:" in needle:
        assert "line 2 column 36" in str(caught.value)  # the "}" after the trailing comma


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load(tmp_path / "absent.json")


@requires_deepspeed
def test_deepspeed_refuses_a_bad_field_and_says_which(tmp_path: Path) -> None:
    user = load(
        write(
            tmp_path,
            json.dumps(
                {
                    "train_micro_batch_size_per_gpu": 1,
                    "zero_optimization": {"stage": 3, "offload_param": {"device": "disk"}},
                }
            ),
        )
    )
    with pytest.raises(ConfigError) as caught:
        check(user)
    assert "DeepSpeed refuses it" in str(caught.value) and "offload_param.device" in str(caught.value)
    check(load(write(tmp_path, json.dumps(AUTO))))  # the auto config is fine


def test_the_auto_values_only_the_trainer_fills_are_named() -> None:
    """transformers' documented ds_config_zero3.json leaves betas and eps "auto": the Trainer fills them from its
    arguments, accelerator.prepare refuses them ("`optimizer.params.betas` not found in kwargs"), so the raw-Accelerate
    case skips and names them instead of failing the run with a remedy that does not apply."""
    from ds_doctor.usersetup.deepspeed_config import trainer_only_auto

    docs = {
        "bf16": {"enabled": "auto"},
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        },
        "scheduler": {
            "type": "WarmupLR",
            "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto"},
        },
        "zero_optimization": {
            "stage": 3,
            "reduce_bucket_size": "auto",
            "stage3_prefetch_bucket_size": "auto",
        },
        "gradient_accumulation_steps": "auto",
        "train_micro_batch_size_per_gpu": "auto",
    }
    assert trainer_only_auto(docs) == ["optimizer.params.betas", "optimizer.params.eps"]
    docs["optimizer"]["params"].update(betas=[0.9, 0.999], eps=1e-8)
    assert trainer_only_auto(docs) == []  # what Accelerate fills itself is no reason to skip

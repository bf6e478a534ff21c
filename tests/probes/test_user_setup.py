"""The user's own DeepSpeed config and model through zero_offload at two ranks, under real torchrun."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.test_e2e import ds_doctor, read_report

pytestmark = pytest.mark.multirank

#: a config as the HF Trainer docs write one: ZeRO-3, both offloads (parameters to an NVMe this node lacks), bf16,
#: clipping, everything sizeable left "auto"
AUTO_CONFIG = {
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
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
        "overlap_comm": True,
        "contiguous_gradients": True,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "nvme", "nvme_path": "/local_nvme", "pin_memory": True},
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
    },
}


def run(out: Path, *args: str) -> dict:
    proc = ds_doctor("run", "--out", str(out), *args, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [result] = read_report(out)["results"]
    assert result["outcome"] == "pass", result["reason"]
    return result


#: a monitor section as users write one, with secrets under keys whose values have no recognisable shape
COMET_KEY, EXPERIMENT_KEY = "q9Vw3Lk7Zp2Rt8Yx4Mn6Bc1Df5", "9f3a2b7c1d8e4f6a0b5c2d9e7f1a3b4c"
MONITOR = {
    "comet": {"enabled": False, "api_key": COMET_KEY, "experiment_key": EXPERIMENT_KEY, "project": "tiny"}
}


#: as many Trainer users write it: no optimizer block (the Trainer passes its own AdamW), and ZeRO-Offload told to
#: accept that client optimizer
TRAINER_CONFIG = {
    **{k: v for k, v in AUTO_CONFIG.items() if k != "optimizer"},
    "zero_force_ds_cpu_optimizer": False,
}


def test_a_user_config_with_auto_values_and_a_factory_model(tmp_path: Path) -> None:
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({**TRAINER_CONFIG, **MONITOR}, indent=2))
    out = tmp_path / "out"
    result = run(
        out,
        "--deepspeed-config",
        str(config),
        "--model",
        "tests.resources.user_models:tied_with_buffers",
        "-k",
        "zero_offload and user-config and ws2",
        "--junit",
        str(tmp_path / "junit.xml"),
        "--prometheus",
        str(tmp_path / "metrics.prom"),
    )
    assert result["case"] == "zero_offload[user-config-ws2]"
    user = result["notes"]["user_config"]
    assert user["path"] == str(config) and user["sha256"] == hashlib.sha256(config.read_bytes()).hexdigest()
    assert user["config"] == {
        **TRAINER_CONFIG,
        "comet": {**MONITOR["comet"], "api_key": "<redacted>", "experiment_key": "<redacted>"},
    }
    assert user["filled"]["train_batch_size"] == 16
    # no optimizer block: the case passes the Trainer's AdamW (plain deepspeed.initialize would refuse the config),
    # and says so
    assert user["changed"]["optimizer"].startswith("(none) -> torch.optim.AdamW(lr=5e-05")
    assert (
        result["notes"]["inner_optimizer"] == "AdamW"
        and result["notes"]["optimizer"] == "DeepSpeedZeroOptimizer_Stage3"
    )
    # issue 21: secrets under the keys of the user's own config reach no output, the run directory included
    outputs = [p for p in tmp_path.rglob("*") if p.is_file() and p != config]
    assert any(p.suffix == ".jsonl" for p in outputs) and any(p.name.endswith(".log") for p in outputs)
    leaked = [
        str(p)
        for p in outputs
        for secret in (COMET_KEY, EXPERIMENT_KEY)
        if secret in p.read_text(errors="ignore")
    ]
    assert leaked == []
    assert result["notes"]["deepspeed_config"]["zero_optimization"]["stage"] == 3
    changed = [f["message"] for f in result["findings"] if f["invariant"] == "config_changed"]
    assert any(
        "offload_param.device: nvme -> cpu: nvme_path '/local_nvme' does not exist" in m for m in changed
    )
    # bf16 ("auto": on) with grad_accum_dtype unset: advice on the user's config (never on ds-doctor's own)
    assert [f["rank"] for f in result["findings"] if f["invariant"] == "grad_accum_dtype"] == [0, 1]
    assert result["notes"]["model"].startswith(
        "tests.resources.user_models:tied_with_buffers (TiedWithBuffers"
    )
    records = result["device_map"]
    for rank in (0, 1):
        buffers = {
            r["path"]
            for r in records
            if r["role"] == "buffer" and r["stage"] == "after_init" and r["rank"] == rank
        }
        assert buffers == {"scale", "positions"}
        tied = [
            r
            for r in records
            if r["role"] == "param"
            and r["stage"] == "after_step"
            and r["rank"] == rank
            and r["path"] == "embed.weight"
        ]
        assert [r["aliases"] for r in tied] == [["head.weight"]]  # still one tensor after ZeRO-3 and a step
    partitions = {r["device"] for r in records if r["role"] == "fp32_partition"}
    assert partitions == {"cpu"}  # the offload the config promises, checked by the invariants


def check_real_architecture(result: dict, model_type: str) -> None:
    assert result["case"] == "zero_offload[z3-opt+param-bf16-ws2]" and result["outcome"] == "pass", result[
        "reason"
    ]
    assert result["notes"]["model"].startswith(f"hf:{model_type} (Qwen3")
    buffers = {r["path"] for r in result["device_map"] if r["role"] == "buffer"}
    assert "model.rotary_emb.inv_freq" in buffers


def test_a_real_architecture_through_zero3_offload(tmp_path: Path) -> None:
    result = run(tmp_path, "--model", "hf:qwen3_moe", "-k", "zero_offload and ws2")
    check_real_architecture(result, "qwen3_moe")
    assert any(".mlp.experts." in r["path"] for r in result["device_map"] if r["role"] == "param")


ACCELERATE_DEEPSPEED = """\
compute_environment: LOCAL_MACHINE
deepspeed_config:
  gradient_accumulation_steps: 1
  gradient_clipping: 1.0
  offload_optimizer_device: cpu
  offload_param_device: none
  zero3_init_flag: false
  zero_stage: 2
distributed_type: DEEPSPEED
mixed_precision: bf16
num_machines: 1
num_processes: 2
use_cpu: false
"""
ACCELERATE_FSDP = """\
distributed_type: FSDP
mixed_precision: bf16
fsdp_config:
  fsdp_version: 2
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_use_orig_params: true
  fsdp_state_dict_type: SHARDED_STATE_DICT
"""


def test_an_accelerate_yaml_drives_the_save_load_round_trip(tmp_path: Path) -> None:
    config = tmp_path / "default_config.yaml"
    config.write_text(ACCELERATE_DEEPSPEED)
    result = run(
        tmp_path / "ds",
        "--accelerate-config",
        str(config),
        "--level",
        "3",
        "-k",
        "optimizer_state_placement and adamw-user and ws2",
    )
    assert result["case"] == "optimizer_state_placement[adamw-user-accelerate-config-ws2]"
    # DeepSpeed through Accelerate for real, not the MULTI_CPU Accelerate falls back to with cpu=True
    assert result["notes"]["accelerate_distributed_type"] == "DEEPSPEED"
    assert result["notes"]["accelerate_config"]["config"]["deepspeed_config"]["zero_stage"] == 2
    roles = {r["role"] for r in result["device_map"] if r["stage"] == "after_load"}
    assert {"fp32_partition", "optim_state"} <= roles
    fsdp = tmp_path / "fsdp.yaml"
    fsdp.write_text(ACCELERATE_FSDP)
    proc = ds_doctor(
        "run",
        "--out",
        str(tmp_path / "fsdp"),
        "--accelerate-config",
        str(fsdp),
        "--level",
        "3",
        "-k",
        "optimizer_state_placement and adamw-user and ws2",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    [skipped] = read_report(tmp_path / "fsdp")["results"]
    assert skipped["outcome"] == "skip" and "Accelerate ignores it on CPU" in skipped["reason"]


def test_s1_on_a_real_architecture_with_a_frozen_part_named_by_pattern(tmp_path: Path) -> None:
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps(AUTO_CONFIG))
    proc = ds_doctor(
        "run",
        "--out",
        str(tmp_path / "out"),
        "--model",
        "hf:qwen3",
        "--freeze",
        "model.layers.0.*",
        "--deepspeed-config",
        str(config),
        "--level",
        "3",
        "-k",
        "frozen_param_names and ws2 and (z2-healthy or z2-set-tensor- or user-config) "
        "or zero_offload and z3-opt+param-bf16-ws2",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    results = {r["case"]: r for r in read_report(tmp_path / "out")["results"]}
    check_real_architecture(results["zero_offload[z3-opt+param-bf16-ws2]"], "qwen3")  # the same launch, qwen3
    healthy, replaced = (
        results["frozen_param_names[z2-healthy-ws2]"],
        results["frozen_param_names[z2-set-tensor-ws2]"],
    )
    assert (
        healthy["outcome"] == "pass"
        and "model.layers.0.self_attn.q_proj.weight" in healthy["notes"]["frozen"]
    )
    assert "model.embed_tokens.weight" not in healthy["notes"]["frozen"]
    # a frozen weight of the user's model replaced after initialize: the name map is stale before the save
    assert replaced["outcome"] == "xfail"
    assert any(
        f["invariant"] == "param_name_map" and "model.layers.0." in f["message"] for f in replaced["findings"]
    )
    user = results["frozen_param_names[user-config-healthy-ws2]"]
    assert user["outcome"] == "pass" and user["notes"]["deepspeed_config"]["zero_optimization"]["stage"] == 3
    # past the warmup's zero lr, every trainable weight but those bf16 cannot move at this lr was seen to train
    assert user["notes"]["not_judged_trained"]["lr"] > 0
    assert all("norm" in name for name in user["notes"]["not_judged_trained"]["parameters"])


def test_s3_coverage_on_a_tied_architecture_by_the_group_rule(tmp_path: Path) -> None:
    proc = ds_doctor(
        "run",
        "--out",
        str(tmp_path),
        "--model",
        "hf:gpt2",
        "--level",
        "3",
        "-k",
        "optimizer_coverage and ws2 and (deepspeed-z3 or fsdp2-ws2)",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    results = {r["case"]: r for r in read_report(tmp_path)["results"]}
    z3 = results["optimizer_coverage[deepspeed-z3-ws2]"]
    assert z3["outcome"] == "pass" and z3["notes"]["group_rule"]["frozen"] == ["transformer.wte.weight"]
    left_out = set(z3["notes"]["group_rule"]["left_out"])
    assert left_out == {
        f"transformer.h.{i}.{ln}.{p}" for i in (0, 1) for ln in ("ln_1", "ln_2") for p in ("weight", "bias")
    } | {"transformer.ln_f.weight", "transformer.ln_f.bias"}  # GPT-2's LayerNorms, by module type
    # exactly the group trained, gathered across ZeRO-3 partitions
    changed = set(z3["notes"]["changed_by_step"])
    assert changed and not changed & left_out and "transformer.wte.weight" not in changed
    assert results["optimizer_coverage[fsdp2-ws2]"]["outcome"] == "skip"


#: the same config written for plain Accelerate: only what Accelerate itself fills is "auto"
ACCELERATE_READY = {
    **AUTO_CONFIG,
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
    "scheduler": {
        "type": "WarmupLR",
        "params": {"warmup_min_lr": 0.0, "warmup_max_lr": "auto", "warmup_num_steps": "auto"},
    },
}


def test_s0_and_s3_on_the_user_config_through_accelerate_and_the_deepspeed_route(tmp_path: Path) -> None:
    # an HF-Trainer-style config (betas "auto"): plain Accelerate would stop at prepare, so its case skips and names
    # the values only the Trainer fills (never a red run with a remedy that does not apply); the coverage family's
    # DeepSpeed route runs it with its own one-group optimizer (one launch for both)
    trainer_style = tmp_path / "trainer.json"
    trainer_style.write_text(json.dumps(AUTO_CONFIG))
    proc = ds_doctor(
        "run",
        "--out",
        str(tmp_path / "trainer"),
        "--deepspeed-config",
        str(trainer_style),
        "-k",
        "(accelerate_deepspeed_lifecycle and user-config or optimizer_coverage and deepspeed-user-config)"
        " and ws2",
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = {r["case"]: r for r in read_report(tmp_path / "trainer")["results"]}
    skipped = results["accelerate_deepspeed_lifecycle[user-config-ws2]"]
    assert skipped["outcome"] == "skip" and skipped["known_issue"] is None  # nothing ran: no verdict
    assert (
        'optimizer.params.betas, optimizer.params.eps as "auto", which only the HF Trainer fills'
        in skipped["reason"]
    )
    route = results["optimizer_coverage[deepspeed-user-config-ws2]"]
    assert route["outcome"] == "pass", route["reason"]
    changed = route["notes"]["user_config"]["changed"]
    assert changed["optimizer"].startswith("dropped") and changed["scheduler"].startswith("dropped")
    # ZeRO-Offload with the route's own AdamW
    assert changed["zero_force_ds_cpu_optimizer"].startswith("false")
    assert sorted(route["notes"]["changed_by_step"]) == ["a.bias", "a.weight", "head.bias", "head.weight"]
    # written for Accelerate, it goes through prepare and trains
    ready = tmp_path / "ready.json"
    ready.write_text(json.dumps(ACCELERATE_READY))
    result = run(
        tmp_path / "ready",
        "--deepspeed-config",
        str(ready),
        "-k",
        "accelerate_deepspeed_lifecycle and user-config and ws2",
    )
    written = result["notes"]["deepspeed_config"]
    assert written["optimizer"]["params"]["lr"] == "auto"  # left for Accelerate to fill, as in the user's job
    assert written["zero_optimization"]["offload_param"]["device"] == "cpu"  # no NVMe here: changed, and said
    assert any(
        f["invariant"] == "config_changed" and "nvme -> cpu" in f["message"] for f in result["findings"]
    )
    prepared = result["notes"]["prepared"]
    assert prepared["optimizer_wraps_engine"] and prepared["scheduler_wraps_engine"]
    assert prepared["num_processes"] == prepared["dist_world_size"] == 2

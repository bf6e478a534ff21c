"""`make verify-catalog` (`python -m ds_doctor.releases.verify [ISSUE ...]`): each planned known issue's reproducing
case run on overlays of the last affected and the first fixed release (and any release whose place in the range is in
doubt), and what it did written to `doctor/knowledge/data/measured.toml`. A maintainer's command: it downloads
releases and builds them; `make test` never runs it (the range test reads what it wrote).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ds_doctor.knowledge.measured import HEADER, Measured, parse, summary

DATA = Path(__file__).resolve().parents[1] / "knowledge" / "data" / "measured.toml"


@dataclasses.dataclass(frozen=True)
class Plan:
    keyword: str  # `-k` selecting the reproducing case
    device: str  # where the issue can show: "cpu" (any node), or "cuda" (measured on a GPU node only)
    extra: tuple[str, ...] = ()  # releases whose place in the range is in doubt
    # `--with` pins the release needs beside it here (an old transformers' hub and tokenizers)
    pins: tuple[str, ...] = ()
    # the keyword selects knob-matrix cases, not a reproducing case: reproduced where one of them fails naming the
    # entry (its `knobs` fit), not reproduced where every one passes
    matrix: bool = False
    ignore_pins: bool = False  # the release's own requirements are not met here (`--ignore-pins`)
    # the first fixed release that runs the case here, where the fix itself cannot (the range's fixed end)
    fixed_end: str | None = None


#: what transformers 4.48-4.53 need beside them on this stack to import (measured)
HF_PINS = ("huggingface_hub==0.30.2", "tokenizers==0.21.1", "requests==2.32.3")

#: The entries with a range and a reproducing case. Not here, and why: the S0 Accelerate entries and the S1 name-map
#: entries hold for every release (no range to measure); ds_z3_offload_gradnorm_device_mismatch and
#: prodigy_group_tensors_left_on_cpu show only on a GPU (measured on the H100: docs/gpu-runs.md).
PLAN = {
    # DeepSpeed #7615: its reporter ran 0.16.4 without the failure; 0.16.5 moved the hook classes' creation from
    # the hooks (checked at each forward) to registration, behind hasattr(module, "post_bwd_fn")
    "ds_z3_ds_grads_remaining_attr_missing": Plan("zero3_hooks and delegating", "cpu", ("0.16.4", "0.16.5")),
    # transformers#34191 (4.46.0): the Trainer's loss per token over the accumulated global batch
    "hf_trainer_ga_loss_per_microbatch": Plan("equivalence and trainer-ga-per-token", "cpu"),
    # seen here on 5.23 (GPT-2): the Trainer counts num_items_in_batch unshifted. 4.46.2, where the count over the
    # accumulation window began, errors on torch 2.13 before a step ("value cannot be converted to type float
    # without overflow"): its lower bound is upstream's word; 4.57.6 reproduces it
    "hf_trainer_num_items_unshifted_overcount": Plan(
        "equivalence and trainer-num-items", "cpu", ("4.46.2", "4.57.6")
    ),
    # transformers#45305: 5.2.0 began handing the accumulation steps to Accelerate; 5.1.0 built no plugin
    "hf_trainer_accelerate_double_ga_division": Plan(
        "equivalence and trainer-ga-double-division", "cpu", ("5.1.0", "5.2.0")
    ),
    # transformers#46731: the LabelSmoother never got num_items_in_batch (since 4.46's #34198), fixed in 5.15.0
    "hf_trainer_label_smoothing_ignores_num_items": Plan("equivalence and trainer-label-smoothing", "cpu"),
    # DeepSpeed PR #7967: 0.15.2's PR #6550 stopped writing the running sum back to the CPU buffer; 0.15.1 did
    "ds_offload_accumulation_keeps_first_microbatch": Plan(
        "equivalence and deepspeed-z2-offload-ga4", "cpu", ("0.15.1", "0.15.2")
    ),
    # DeepSpeed #7837 (PR #7839): 0.17.6's PR #7515 sent bf16 without ZeRO to the fp16 wrapper; 0.17.5 did not
    "ds_z0_bf16_grads_unscaled_and_kept": Plan(
        "equivalence and deepspeed-z0-bf16", "cpu", ("0.17.5", "0.17.6")
    ),
    # found by ds-doctor bisect (2026-11-26): 1.13.0 made MULTI_CPU under torchrun depend on cpu=True
    "acc_cpu_process_count_mismatch": Plan(
        "accelerate_deepspeed_lifecycle and no-backend-kwargs", "cpu", ("1.12.0", "1.13.0")
    ),
    # Accelerate PR #2790: sync_each_batch (new in 0.28.0, PR #2531) forced sync_gradients on every micro-batch
    "acc_sync_each_batch_steps_every_microbatch": Plan(
        "equivalence and accelerate-sync-each-batch", "cpu", ("0.28.0",)
    ),
    # issue 50's corpus: caught by the knob matrix, no case of their own (docs/invariants.md)
    "ds_z2_accumulation_keeps_last_microbatch": Plan(
        "equivalence and matrix-deepspeed-z2 and not ga1 and not offload", "cpu", matrix=True
    ),
    "ds_warmup_schedulers_start_at_optimizer_lr": Plan(
        "equivalence and matrix-deepspeed-z0 and warmup and not client", "cpu", matrix=True
    ),
    "ds_warmup_cosine_groups_start_at_base_lr": Plan(
        "equivalence and matrix-deepspeed-z0 and cosine and (decay or rates)", "cpu", matrix=True
    ),
    "ds_warmup_lr_groups_take_group0_peak": Plan(
        "equivalence and matrix-deepspeed and warmup-lr and rates and ws1", "cpu", matrix=True
    ),
    # the fresh sample's #5, caught by the OneCycle knob (added after reading it); fp32: a bf16 setting's step is
    # within its tolerance, and the ZeRO-3 bf16 resume setting at two ranks is left out (a parameter not restored
    # on 0.19.3 and 0.19.4 in one run of two: not yet told apart)
    "ds_onecycle_stair_count_ignored": Plan(
        "equivalence and matrix-deepspeed and onecycle and not bf16 and not cycle-momentum",
        "cpu",
        matrix=True,
    ),
    # the seventh search's #8 (DeepSpeed PR #8495), open: measured as installed and at 0.16.9 (where the stairs' bug
    # shows on the same settings too)
    "ds_onecycle_momentum_overwrites_beta2": Plan(
        "equivalence and cycle-momentum", "cpu", ("0.16.9", "0.19.8"), matrix=True
    ),
    # found by the matrix's `adam` knob at today's release (no fix released): measured as installed and at 0.17.5,
    # whose bf16 without ZeRO went through BF16_Optimizer, not the fp16 wrappers
    "ds_fp16_wrapper_init_step_moves_l2_weights": Plan(
        "equivalence and matrix-deepspeed-z0 and bf16 and adam", "cpu", ("0.17.5", "0.19.8"), matrix=True
    ),
    # found by the matrix's `adam` knob while the fourth sample's DeepSpeed 0.16.4 bug was run (in no search);
    # bisected to 0.19.5 / 0.19.6 at ZeRO-3, one rank
    "ds_cpu_fused_adam_ignores_l2_mode": Plan(
        "equivalence and matrix-deepspeed-z3-decay-warmup-lr-adam-ws1", "cpu", matrix=True
    ),
    # found by sweeping ZeRO's matrix over DeepSpeed 0.18.1 (2026-11-30): the only setting with ZeRO-1, bf16, fp32
    # accumulation and a resume raised at its load
    "ds_z1_bf16_fp32_accum_load_fails": Plan(
        "equivalence and matrix-deepspeed-z1-bf16-ga4-onecycle-client-accumulate-fp32-resume-ws1",
        "cpu",
        matrix=True,
    ),
    # the same bug seen silently, since the `zero_optimizer_built` invariant: the engine's optimizer at initialize
    "ds_z1_bf16_fp32_accum_gets_fp16_wrapper": Plan(
        "equivalence and matrix-deepspeed-z1-bf16-ga4-decay-warmup-lr-accumulate-fp32-ws1", "cpu", matrix=True
    ),
    # found by sweeping ZeRO's matrix over DeepSpeed 0.15.4 (2026-11-30): every ZeRO-3 setting raises it on a node
    # without numactl (this one: no numactl here)
    "ds_cpu_accelerator_needs_numactl": Plan(
        "equivalence and matrix-deepspeed-z3-sgd-ws1", "cpu", matrix=True
    ),
    # found by sweeping the Trainer's matrix over transformers 5.x (2026-11-30): an error, not a divergence; every
    # trainer-deepspeed setting raises it on 5.1.0 (PR #43780 fixed it in 5.2.0)
    "hf_trainer_deepspeed_model_never_prepared": Plan(
        "equivalence and matrix-trainer-deepspeed-smoothing-ws1", "cpu", matrix=True
    ),
    # the same sweep: every resumed Trainer setting at two CPU processes raises from 4.56.2 to 5.17.0, none on 5.18.0
    "hf_trainer_resume_cpu_indexed_map_location": Plan(
        "equivalence and matrix-trainer-ga1-noclip-smoothing-resume-ws2", "cpu", matrix=True
    ),
    # the 2026-11-30 sweep of 4.46-4.57: every resumed Trainer setting raises it on 4.46.1 and 4.46.3 (torch 2.13)
    "hf_trainer_resume_rng_state_weights_only": Plan(
        "equivalence and matrix-trainer-ga1-noclip-smoothing-resume-ws1", "cpu", matrix=True
    ),
    # the fourth sample's #2 (transformers PR #40347), caught by the Trainer's `resume` and `partial_window` knobs
    # (built after reading it): one optimizer step fewer than plain torch
    "hf_trainer_resume_partial_window_not_stepped": Plan(
        "equivalence and matrix-trainer-bf16-warmup-sgd-resume-partial-window-ws1", "cpu", matrix=True
    ),
    # the third sample's #5 (transformers PR #33673), shown by the `partial_window` knob (built for another bug) on
    # 4.46.1 and measured in the setting added beside the design for it (each row's first label masked, so that
    # 4.46.2-4.46.3's unshifted count does not fit first)
    "hf_trainer_accumulation_counter_across_epochs": Plan(
        "equivalence and matrix-trainer-partial-window-ws1", "cpu", ("4.46.1",), matrix=True
    ),
    # the fourth sample's #1 (DeepSpeed PR #7050), caught by the `offload_states` knob (built after reading it) in
    # the setting added for it by hand: decay groups, the states moved aside and back
    "ds_z3_reload_states_group_order": Plan(
        "equivalence and matrix-deepspeed-z3-decay-offload-states-ws1", "cpu", matrix=True
    ),
    # the third sample's #2 (Accelerate PR #2694), caught by the `rank_seeds` knob (built after reading it): each rank
    # shuffles on its own; 0.24.0 swapped the plain sampler for its seedable one, 0.25.0 made that opt-in (read)
    "acc_plain_sampler_unsynced_across_ranks": Plan(
        "equivalence and matrix-accelerate and not deepspeed and rank-seeds and not sync-each-batch and ws2",
        "cpu",
        ("0.24.0", "0.25.0"),
        matrix=True,
    ),
    # the fresh sample's #8 (Accelerate PR #3246), caught by the `batch_sampler` knob (built after reading it) at one
    # process; at two the same setting fails on every release (the sharded entry below)
    "acc_batch_sampler_set_epoch_not_forwarded": Plan(
        "equivalence and matrix-accelerate-ga1-shuffle-batch-sampler-ws1", "cpu", matrix=True
    ),
    # Accelerate PR #3556 and transformers #40690 (docs/research/corpus-hf.md #3, read and measured before the knob):
    # the Trainer's shuffled sampler resumed inside its second epoch, the setting added beside the design for them
    "acc_skip_first_batches_set_epoch_not_forwarded": Plan(
        "equivalence and matrix-trainer-resume-shuffle-ws1", "cpu", ("1.3.0",), matrix=True
    ),
    # ...which shows on transformers 4 only beside Accelerate 1.7.0-1.14.0 (4.46.3 cannot resume on torch 2.13 at
    # all: its torch.load of the RNG state is refused by weights_only, an error, not a measure)
    "hf_trainer_resume_replays_epoch0_order": Plan(
        "equivalence and matrix-trainer-resume-shuffle-ws1", "cpu", pins=("accelerate==1.14.0",), matrix=True
    ),
    # accelerate PR #4071 on Accelerate's own loop (the shuffled resume beside its design): 1.6.0 is the release
    # before the range, where the skipped loader's set_epoch did not reach the sampler at all
    "acc_skip_first_batches_resets_epoch": Plan(
        "equivalence and matrix-accelerate-ga1-resume-shuffle-ws1", "cpu", ("1.6.0", "1.7.0"), matrix=True
    ),
    # accelerate issue #3996 (open): the same resume without set_epoch, as Accelerate's checkpointing guide writes
    # the loop; no fixed release, so its ends are the first release measured and the installed one
    "acc_resume_loader_epoch_not_saved": Plan(
        "equivalence and matrix-accelerate-ga1-resume-shuffle-no-set-epoch-ws1",
        "cpu",
        ("0.28.0", "1.6.0", "1.7.0"),
        matrix=True,
    ),
    # the torch walk's #3 and #2 (docs/research/corpus-torch.md), both open: measured as installed and on 2.14.1
    "torch_fsdp1_hybrid_single_rank_shard_never_syncs": Plan(
        "equivalence and matrix-fsdp1-hybrid-ws2", "cpu", ("2.13.0+cpu", "2.14.1"), matrix=True
    ),
    "torch_dcp_get_state_dict_steps_fresh_optimizer": Plan(
        "equivalence and matrix-fsdp2-state-dict-first", "cpu", ("2.13.0+cpu", "2.14.1"), matrix=True
    ),
    # the seventh search's #1 (open), caught by the nested knob added after reading it
    "torch_sequentiallr_nested_composite_steps_ahead": Plan(
        "equivalence and matrix-ddp-nested", "cpu", ("2.13.0+cpu", "2.14.1"), matrix=True
    ),
    # found by the batch-sampler knob at two processes: no fixed release, so its ends are its first measured release
    # and the installed one
    "acc_sharded_batch_sampler_set_epoch_not_forwarded": Plan(
        "equivalence and matrix-accelerate-ga1-shuffle-batch-sampler-ws2",
        "cpu",
        ("0.34.2", "1.0.1", "1.1.1", "1.2.0"),
        matrix=True,
    ),
    # the ninth search's #4 (accelerate issue #3177, open), caught by the `split` knob (added after reading it):
    # 0.34.2 still reads the keyword, 1.0.0 (PR #3098) the first that does not
    "acc_split_batches_keyword_ignored": Plan(
        "equivalence and matrix-accelerate-ga1-shuffle-split-keyword-ws2",
        "cpu",
        ("0.34.2", "1.0.0"),
        matrix=True,
    ),
    # the fresh sample's #9, caught by the `adam` knob and offload on Accelerate's DeepSpeed route (added after
    # reading it)
    "acc_deepspeed_offload_swaps_adam_for_adamw": Plan(
        "equivalence and matrix-accelerate-deepspeed and offload and adam", "cpu", matrix=True
    ),
    # the fresh sample's #3 and #6, caught by the `muon` knob (added after reading them); ZeRO-3's at one rank: at two,
    # 0.18.9-0.19.7 raise in gloo's all_gather of matrices of different shapes (ds_muon_zero3_allgather_mixed_shapes)
    "ds_muon_zero12_reduce_scatter_partial_grads": Plan(
        "equivalence and matrix-deepspeed and muon and not z3 and not offload and ws2", "cpu", matrix=True
    ),
    "ds_muon_zero3_per_microbatch": Plan(
        "equivalence and matrix-deepspeed-z3 and muon and not ga1 and ws1", "cpu", matrix=True
    ),
    # ZeRO-3's Muon at two ranks: the all_gather of matrices of different shapes (0.19.6's raise seen first)
    "ds_muon_zero3_allgather_mixed_shapes": Plan(
        "equivalence and matrix-deepspeed-z3 and muon and ws2", "cpu", ("0.19.6",), matrix=True
    ),
    # found by the `muon` knob on 0.19.7 (the release of the sample's #6); 0.19.6, before the staging, passes
    "ds_muon_zero12_momentum_staging_lost": Plan(
        "equivalence and matrix-deepspeed and muon and not z3 and not offload and ws1",
        "cpu",
        ("0.19.6",),
        matrix=True,
    ),
    # the third sample's #6, caught by the matrix before any case (the Trainer's loss the reference's times the
    # accumulation steps); its two affected releases, each beside its fix (which shows the unshifted count instead)
    "hf_trainer_kwargs_models_loss_not_divided": Plan(
        "equivalence and matrix-trainer and not deepspeed and not smoothing and not ga1 and ws1",
        "cpu",
        ("4.47.0", "4.47.1"),
        pins=HF_PINS,
        matrix=True,
    ),
    # the eighth search's #3 (transformers #47688, open), caught by the classify head (added after reading it): the
    # generic classification heads came in 4.54.0; 4.53.3's Qwen2 head, its own, is measured beside it
    "hf_trainer_head_drops_num_items": Plan(
        "equivalence and matrix-trainer-ga4-classify-ws1",
        "cpu",
        ("4.53.3", "4.54.0", "5.24.0"),
        # 4.54.0 needs huggingface_hub >= 0.34 (HF_PINS' 0.30.2 is 4.48-4.53's)
        pins=("huggingface_hub==0.34.4", "tokenizers==0.21.1", "requests==2.32.3"),
        matrix=True,
    ),
    # the third sample's #1, caught by the shuffle knob (added after that sample); 0.29.0, the fix, raises at two
    # processes on a CPU ("Can't set device for DistributedType.NO"): 0.29.3 is the first fixed release that runs
    "acc_seedable_sampler_unused_across_processes": Plan(
        "equivalence and matrix-accelerate-ga1-shuffle-ws2",
        "cpu",
        ("0.29.3",),
        matrix=True,
        fixed_end="0.29.3",
    ),
    # 0.17.0, the fix, asserts on a CPU before a step (PartialState built with cpu=True, the optimizer's with
    # cpu=False): 0.18.0 is the first fixed release that runs here
    "acc_torch2_scheduler_not_prepared": Plan(
        "equivalence and matrix-accelerate-decay-warmup",
        "cpu",
        ("0.18.0",),
        pins=("setuptools==69.5.1",),
        matrix=True,
        ignore_pins=True,
        fixed_end="0.18.0",
    ),
    "ds_backward_scale_wrt_gas_ignored": Plan(
        "equivalence and matrix-trainer-deepspeed and not ga1 and ws1", "cpu", matrix=True
    ),
    "ds_bf16_optimizer_boundary_microbatch_not_reduced": Plan(
        "equivalence and matrix-deepspeed-z1 and bf16 and accumulate-fp32 and not offload and ws2",
        "cpu",
        matrix=True,
    ),
    # the fresh sample's #2 (docs/invariants.md): caught by the resume knob, added after reading it
    "ds_z0_bf16_resume_loses_optimizer_state": Plan(
        "equivalence and matrix-deepspeed-z0 and bf16 and resume", "cpu", matrix=True
    ),
    # found by the matrix on the fresh sample's Accelerate release, dated by ds-doctor bisect; one rank: at two,
    # 1.8.0's accumulate() enters the engine's no_sync, which ZeRO-2 refuses (an assertion, not this entry)
    "acc_deepspeed_accumulation_steps_not_synced": Plan(
        "equivalence and matrix-accelerate-deepspeed and warmup and not ga1 and ws1", "cpu", matrix=True
    ),
    # met by the matrix's Trainer sweep over Accelerate 1.1.1 and 1.2.1: every Trainer setting raises at train();
    # the lower end is transformers' (4.52.0 began passing keep_torch_compile), beside an Accelerate without it
    "hf_trainer_unwrap_keep_torch_compile_old_accelerate": Plan(
        "equivalence and matrix-trainer-ga4-sgd and ws1",
        "cpu",
        ("4.51.3", "4.52.0"),
        pins=("accelerate==1.2.1", *HF_PINS),
        matrix=True,
    ),
    # found by the matrix's Trainer sweep over Accelerate releases (transformers 5.24.0): the partial window alone
    "acc_deepspeed_short_window_not_stepped": Plan(
        "equivalence and matrix-trainer-deepspeed and partial-window and ws1", "cpu", matrix=True
    ),
    # found by the matrix on the fresh sample's DeepSpeed releases, dated by ds-doctor bisect (a CPU-only bug)
    "ds_cpu_zero12_allreduce_buckets_dropped": Plan(
        "equivalence and matrix-deepspeed-z1 and offload and accumulate-fp32 and ws2", "cpu", matrix=True
    ),
    # the fresh sample's #14, found by the SGD knob on 4.53.0; the settings with label smoothing at accumulation 1:
    # the LabelSmoother computes their loss, so the unshifted count of 4.46.2-5.x (on every other Trainer setting
    # of these releases) does not show there
    "hf_trainer_sgd_optim_args_dropped": Plan(
        "equivalence and matrix-trainer and sgd and smoothing and ga1 and ws1", "cpu", matrix=True
    ),
    # the settings at accumulation 1: at 2 and 4 the releases of both ranges (4.48-4.53) also show the unshifted
    # label count (loss x 63/79 at step 1) and the LabelSmoother's missing division (x 2), entries of their own
    "hf_trainer_decays_rmsnorm_weights": Plan(
        "equivalence and matrix-trainer and decay and ga1 and ws1", "cpu", pins=HF_PINS, matrix=True
    ),
    "hf_trainer_decays_final_norm": Plan(
        "equivalence and matrix-trainer and decay and ga1 and ws1", "cpu", pins=HF_PINS, matrix=True
    ),
}


#: Entries with a range that are not measured here, and why.
NOT_HERE = {
    "peft_lora_get_submodules_moved": "a user script's call into PEFT 0.2's private method, no case of the doctor's "
    "to run: read in 0.2.0's peft/tuners/lora.py (a LoraModel method) and 0.3.0's peft/utils/other.py (a function)",
    "ds_launcher_sigint_kill_cmd_unbound": "its releases (0.8.0-0.9.3) do not import on torch 2.13 "
    "(ds_import_torch_private_removed); read in their runner.py and 0.9.4's, not run",
    "ds_z3_offload_gradnorm_device_mismatch": "shows only with a GPU (offloaded grads vs a CUDA norm): reproduced "
    "live at 0.14.2 on the H100, docs/gpu-runs.md",
    "prodigy_group_tensors_left_on_cpu": "shows only with a GPU: reproduced live at 1.8.51 on the H100, "
    "docs/gpu-runs.md",
    "ds_offload_client_optimizer_rejected": "a refusal by design since 0.8.3: no fixed release to measure",
    "ds_ckpt_torch26_weights_only": "no reproducing case of its own; seen 2026-11-26 on a 0.14.4 overlay (torch 2.13): "
    "frozen_param_names' healthy cases fail at load_checkpoint with 'Weights only load failed', and not on 0.16.0",
    "ds_import_torch_private_removed": "releases < 0.14.4 do not import on this torch: the failure is the import",
    "ds_import_numpy2_bufsize": "releases < 0.14.4 do not import on this torch: the failure is the import",
    "composer_single_group_rebuild": "shows only with a GPU (Composer's FSDP passes device_id=torch.cuda."
    "current_device()): reproduced live at 0.23.5, absent at 0.24.0 on the H200, docs/gpu-runs.md "
    "(docs/gpu/composer.sh)",
    "composer_group_subset_keyerror": "shows only with a GPU, as composer_single_group_rebuild: raised live at "
    "0.23.5, absent at 0.24.0 on the H200, docs/gpu-runs.md (docs/gpu/composer.sh)",
    "ds_no_sync_under_zero_partitioned_grads": "a refusal by design since 0.16.0 (engine.no_sync() asserts under ZeRO "
    "2/3): no fixed release to measure",
    "numpy2_pickle_read_by_numpy1": "the reader's numpy decides (< 2.0), not a case's outcome: no overlay measures it",
    "nccl_duplicate_gpu_subgroups_before_set_device": "needs several GPUs with NCCL >= 2.26 (a communicator per "
    "GPU); not reproduced here",
    # issue 48's entries with a range: error texts whose releases were read, no case of a family to run at the ends
    "ds_z3_inflight_params": "an error text with no case of its own; its range was read in the releases' sources",
    "peft_merge_into_quantized_base": "needs bitsandbytes on a GPU; its range was read in peft 0.4.0-0.6.0",
    "hf_training_args_removed_argument": "a removal by design since transformers 4.51: no fixed release to measure",
    "trl_trainer_log_start_time_signature": "an error text with no case of its own (a TRL trainer's first log "
    "beside transformers >= 4.47); its range was read in trl 0.12.1-0.13.0 and transformers 4.46.3-4.47.0",
    "peft_config_field_unknown_to_release": "no case of its own (a config saved by a newer peft, read by an older "
    "one); its range was read in peft 0.4.0-0.21.2",
    "hf_remote_code_old_gradient_checkpointing": "needs a remote-code model on transformers 4.35; its range was read "
    "in 4.34.1-4.36.2",
    "hf_rope_scaling_new_format_old_release": "needs a model config of the new rope format on transformers < 4.43; "
    "its range was read in 4.31.0-4.44.2",
    "nccl_ib_collective_size_mismatch": "needs InfiniBand between nodes with NCCL < 2.20; its range was read at the "
    "NCCL tags v2.4.6-v2.19.4 (v2.20 truncates instead)",
}


def releases(package: str) -> list[str]:
    """The package's released versions, oldest first, as the index lists them."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package],
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("Available versions:")), "")
    found = []
    for text in line.partition(":")[2].split(","):
        try:
            version = Version(text.strip())
        except InvalidVersion:
            continue
        if not version.is_prerelease:
            found.append(version)
    return [str(v) for v in sorted(found)]


def newest_overlay(packages: list[str]) -> list[str]:
    """`--with` arguments for each package whose newest release on the index is not the one installed."""
    from ds_doctor.releases.overlay import installed

    args = []
    for package in packages:
        found = releases(package)
        if found and found[-1] != installed(package):
            args += ["--with", f"{package}=={found[-1]}"]
        else:
            print(
                f"canary: {package} {installed(package)} is the newest release on the index", file=sys.stderr
            )
    return args


def ends_of_range(fixed_in: str, available: list[str]) -> list[str]:
    """The last release before the fix and the fix itself."""
    fixed = Version(fixed_in)
    before = [v for v in available if Version(v) < fixed]
    return [*before[-1:], fixed_in]


def _run(keyword: str, overlay: str | None, pins: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`ds-doctor run --level 3 -k KEYWORD [--with OVERLAY --with PIN ...] --json`, its report in the verify cache
    (a pin that is an option, `--ignore-pins`, passed as it is)."""
    out = Path.home() / ".cache" / "ds-doctor" / "verify"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ds_doctor.cli",
            "run",
            "--level",
            "3",
            "-k",
            keyword,
            *(("--with", overlay) if overlay else ()),
            *(
                arg
                for pin in (pins if overlay else ())
                for arg in ((pin,) if pin.startswith("--") else ("--with", pin))
            ),
            "--json",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=3600,
    )


def _report(proc: subprocess.CompletedProcess[str], label: str) -> dict | None:
    """The run's JSON report, or None (said on stderr, with the run's exit code and last words) where it wrote none."""
    try:
        return dict(json.loads(proc.stdout))
    except ValueError:
        print(f"{label}: no report (exit {proc.returncode}): {proc.stderr.strip()[-300:]}", file=sys.stderr)
        return None


def measure(issue: str, package: str, version: str, plan: Plan, torch_version: str) -> Measured | None:
    """One run of the case on an overlay of the release (on the stack as installed where that is the release);
    None where it neither ran nor was refused at import."""
    from ds_doctor.releases.overlay import installed

    here = installed(package) == version
    proc = _run(
        plan.keyword,
        None if here else f"{package}=={version}",
        plan.pins + (("--ignore-pins",) if plan.ignore_pins else ()),
    )
    today = dt.date.today().isoformat()
    if proc.returncode == 2 and "does not import on this stack" in proc.stderr:
        return Measured(
            issue, package, version, "does_not_import", plan.keyword, plan.device, torch_version, today
        )
    report = _report(proc, f"{issue} {version}")
    if report is None:
        return None
    ran = ran_on(report, None if here else f"{package}=={version}")
    found = (
        matrix_records(ran, issue, package, version, torch_version, today)
        if plan.matrix
        else records_of(ran, {issue}, package, version, torch_version, today)
    )
    if not found:
        print(
            f"{issue} {version}: the case neither reproduced nor passed: "
            f"{[(r['case'], r['outcome']) for r in report['results']]}",
            file=sys.stderr,
        )
        return None
    return found[0]


@dataclasses.dataclass(frozen=True)
class Ends:
    """The every-version entries of one package whose reproducing cases one family runs: measured together at the
    oldest release that installs and imports here and at the newest (the one installed, where it is the newest)."""

    keyword: str  # `-k` selecting the family's cases
    oldest: str  # the oldest release that imports on this torch and runs the family (why, beside it in ENDS)


#: package -> its every-version entries' family and oldest release that runs it here. DeepSpeed < 0.14.4 does not
#: import on torch 2.13 (ds_import_torch_private_removed), and < 0.16.0 cannot load its own checkpoints on torch >= 2.6
#: (ds_ckpt_torch26_weights_only: the family's healthy cases fail at load_checkpoint on 0.14.4, measured): 0.16.0.
#: Accelerate < 1.1.0 is refused by the installed transformers 5.24 ("accelerate>=1.1.0 is required") and 0.28.0
#: calls torch._C._cuda_setDevice on a CPU build (measured): 1.1.0.
ENDS = {
    "deepspeed": Ends("frozen_param_names", "0.16.0"),
    "accelerate": Ends("accelerate_deepspeed_lifecycle", "1.1.0"),
}


def measure_ends(package: str, ends: Ends, version: str, overlay: bool, torch_version: str) -> list[Measured]:
    """One run of the family (on an overlay of `version`, or as installed): a record for each every-version entry
    of `package` that one of its reproducing cases named, xfail or xpass."""
    from ds_doctor.knowledge import catalog

    proc = _run(ends.keyword, f"{package}=={version}" if overlay else None)
    today = dt.date.today().isoformat()
    if proc.returncode == 2 and "does not import on this stack" in proc.stderr:
        print(f"{package} {version}: does not import here: {proc.stderr.strip()[-300:]}", file=sys.stderr)
        return []
    report = _report(proc, f"{package} {version}")
    if report is None:
        return []
    every = {i.id for i in catalog.ISSUES if i.package == package and not i.affected}
    ran = ran_on(report, f"{package}=={version}" if overlay else None)
    return records_of(ran, every, package, version, torch_version, today)


def ran_on(report: dict, spec: str | None) -> list[dict]:
    """The results of a report that ran on the overlay whose first release is `spec` (its pins after it, joined
    by "+"), or on the installed stack where `spec` is None: a run --with holds the installed stack too."""
    return [
        r
        for r in report["results"]
        if (r.get("stack") or None) == spec or (spec and str(r.get("stack") or "").startswith(f"{spec}+"))
    ]


def records_of(
    results: list[dict], entries: set[str], package: str, version: str, torch_version: str, today: str
) -> list[Measured]:
    """A record per entry of `entries` that one of the results named, xfail or xpass: `reproduced` where any of its
    cases showed it (the first such case), else `not_reproduced` (its first case)."""
    records: dict[str, Measured] = {}
    for r in results:
        named = str((r.get("known_issue") or {}).get("id"))
        if named not in entries or r["outcome"] not in ("xfail", "xpass"):
            continue
        if named in records and (records[named].outcome == "reproduced" or r["outcome"] == "xpass"):
            continue
        outcome = "reproduced" if r["outcome"] == "xfail" else "not_reproduced"
        records[named] = Measured(
            named, package, version, outcome, r["case"], r["device_kind"], torch_version, today
        )
    return list(records.values())


def matrix_records(
    results: list[dict], issue: str, package: str, version: str, torch_version: str, today: str
) -> list[Measured]:
    """The entry's record from knob-matrix cases: `reproduced` where one failed or raised naming it (the first such:
    an entry of an error the matrix meets, as transformers 5.1.0's unprepared DeepSpeed engine), else
    `not_reproduced` where every one passed or failed or raised naming another entry (a bug of its own that the
    release has, as transformers 4.49.0's final norm beside the fixed layers' norms); none where they did neither
    (an error nothing names, a skip, a divergence nothing names)."""

    def record(outcome: str, case: str, device: str) -> list[Measured]:
        return [Measured(issue, package, version, outcome, case, device, torch_version, today)]

    for r in results:
        if r["outcome"] in ("fail", "error") and (r.get("known_issue") or {}).get("id") == issue:
            return record("reproduced", r["case"], r["device_kind"])
    if results and all(
        r["outcome"] == "pass"
        or (r["outcome"] in ("fail", "error") and (r.get("known_issue") or {}).get("id"))
        for r in results
    ):
        return record("not_reproduced", results[0]["case"], results[0]["device_kind"])
    return []


def table(records: list[Measured], issues: list) -> str:
    """docs/known-issues.md: every entry, its range, and what was measured of it here (or why nothing was)."""
    lines = [
        "# Known issues: ranges, and what was measured here",
        "",
        "Generated by `python -m ds_doctor.releases.verify --table` from the catalog (`doctor/knowledge/data/`) and",
        "the records `make verify-catalog` wrote (`measured.toml`); `tests/knowledge/test_measured.py` keeps it",
        "current. A verdict on a range nobody measured here comes from the upstream threads in the entry's refs.",
        "",
        f"{len({r.issue for r in records})} of {len(issues)} entries measured, {len(records)} record(s).",
        "",
        "| entry | package | affected | measured here |",
        "|---|---|---|---|",
    ]
    for issue in issues:
        seen = sorted((r for r in records if r.issue == issue.id), key=lambda r: Version(r.version))
        said = (
            "; ".join(
                f"{r.version}: {r.outcome.replace('_', ' ')} ({r.device}, torch {r.torch}, {r.date})"
                for r in seen
            )
            or NOT_HERE.get(issue.id)
            or (
                "planned"
                if issue.id in PLAN
                else "every version: no range to bound"
                if not issue.affected
                else "not measured yet"
            )
        )
        affected = (issue.affected or "every version") + issue.beside()
        lines.append(f"| `{issue.id}` | {issue.package} | {affected} | {said} |")
    return "\n".join(lines) + "\n"


def write(records: list[Measured]) -> None:
    ordered = sorted(records, key=lambda r: (r.issue, Version(r.version), r.device))
    DATA.write_text(HEADER + "".join(r.to_toml() for r in ordered))


def main(argv: list[str] | None = None) -> int:
    from ds_doctor.knowledge import catalog
    from ds_doctor.releases.overlay import installed

    parser = argparse.ArgumentParser(prog="python -m ds_doctor.releases.verify", description=__doc__)
    parser.add_argument("issues", nargs="*", help="entries to measure (default: every planned one)")
    parser.add_argument(
        "--table", action="store_true", help="print docs/known-issues.md from the data; measure nothing"
    )
    parser.add_argument(
        "--newest",
        nargs="+",
        metavar="PKG",
        help="print `--with PKG==VER` for each package whose newest release is not the installed one "
        "(make canary); measure nothing",
    )
    parser.add_argument(
        "--ends",
        action="store_true",
        help="measure the every-version entries with a reproducing case at the oldest release that imports here "
        "and at the installed one (ENDS)",
    )
    args = parser.parse_args(argv)
    if args.ends:
        return main_ends()
    if args.newest:
        print(" ".join(newest_overlay(args.newest)))
        return 0
    if args.table:
        print(table(list(parse(DATA.read_text())), list(catalog.ISSUES)), end="")
        return 0
    torch_version = installed("torch") or "unknown"
    known = {i.id: i for i in catalog.ISSUES}
    kept = list(parse(DATA.read_text())) if DATA.exists() else []
    for issue_id in args.issues or list(PLAN):
        entry, plan = known[issue_id], PLAN[issue_id]
        versions = (
            sorted({*ends_of_range(entry.fixed_in, releases(entry.package)), *plan.extra}, key=Version)
            if entry.fixed_in
            else list(plan.extra)
        )
        for version in versions:
            record = measure(issue_id, entry.package, version, plan, torch_version)
            if record is None:
                continue
            print(f"{issue_id}: {entry.package} {version}: {record.outcome}")
            kept = [
                r for r in kept if (r.issue, r.version, r.device) != (issue_id, version, record.device)
            ] + [record]
            write(kept)
    counts = summary(kept)
    print(f"{len(counts)} entr(y/ies) measured, {len(kept)} record(s): {DATA}")
    return 0


def main_ends() -> int:
    """`--ends`: each ENDS package's family at its oldest release (an overlay) and as installed."""
    from ds_doctor.releases.overlay import installed

    torch_version = installed("torch") or "unknown"
    kept = list(parse(DATA.read_text())) if DATA.exists() else []
    for package, ends in ENDS.items():
        newest = installed(package)
        for version, overlay in ((ends.oldest, True), (newest, False)):
            if version is None:
                continue
            for record in measure_ends(package, ends, version, overlay, torch_version):
                print(f"{record.issue}: {package} {version}: {record.outcome}")
                kept = [
                    r
                    for r in kept
                    if (r.issue, r.version, r.device) != (record.issue, version, record.device)
                ] + [record]
            write(kept)
    print(f"{len(summary(kept))} entr(y/ies) measured, {len(kept)} record(s): {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Known issues of Accelerate with DeepSpeed (S0 placeholders and orderings), process counts on CPU, mixed precision, and the
optimizers and trainers used through it (S4: Prodigy's group tensors; the HF Trainer's config).

Entries are written from the upstream threads (see shared/KNOWN_ISSUES.md for the raw notes).
"""

from __future__ import annotations

from doctor.knowledge.issues import KnownIssue

_ACC = "accelerate"

ACCELERATE: tuple[KnownIssue, ...] = (
    KnownIssue(
        id="acc_ds_placeholder_used_before_prepare",
        title="Accelerate + DeepSpeed: DummyOptim / DummyScheduler used where the real one was expected",
        package=_ACC,
        patterns=(r"'Dummy(Optim|Scheduler)' object has no attribute '\w+'",),
        cause="When the DeepSpeed config owns the optimizer or scheduler, DummyOptim / DummyScheduler are placeholders "
        "that DeepSpeed replaces inside accelerator.prepare. Code that builds a scheduler on DummyOptim, or steps a "
        "placeholder, before (or without) prepare returning the real object finds no param_groups / step.",
        remedy="Order the steps model -> DummyOptim -> (DummyScheduler) -> one accelerator.prepare(model, optimizer, "
        "dataloader, scheduler) -> use what prepare returned. Build a torch scheduler only after prepare, on the "
        "prepared optimizer, and check hasattr(obj, 'param_groups') in trainers that support both paths.",
        refs=("https://github.com/bghira/SimpleTuner/issues/796", "https://github.com/huggingface/transformers/issues/24640",
              "https://github.com/LlamaChinese/Llama-Chinese/issues/163"),
        families=("accelerate_deepspeed_lifecycle",),
    ),
    KnownIssue(
        id="acc_ds_optimizer_defined_twice",
        title="Accelerate + DeepSpeed: optimizer in both the DeepSpeed config and code, or DummyOptim with none in the config",
        package=_ACC,
        patterns=(r"You cannot specify an optimizer in the config file and in the code at the same time",
                  r"You cannot create a .DummyOptim. without specifying an optimizer in the config file",
                  r"You can only specify .accelerate\.utils\.DummyScheduler. in the code when using"),
        cause="The DeepSpeed JSON has an \"optimizer\" block while the code passes a torch optimizer to prepare(), or "
        "the code passes DummyOptim while the JSON has no optimizer.",
        remedy="Either drop the optimizer from the DeepSpeed config and pass your own, or keep it in the config and pass "
        "accelerate.utils.DummyOptim(params, lr=...); pair DummyScheduler only with DummyOptim.",
        refs=("https://github.com/huggingface/trl/issues/636", "https://github.com/modelscope/ms-swift/issues/1763"),
        families=("accelerate_deepspeed_lifecycle",),
    ),
    KnownIssue(
        id="acc_ds_scheduler_defined_twice",
        title="Accelerate + DeepSpeed: scheduler both in the DeepSpeed config and in code",
        package=_ACC,
        patterns=(r"You cannot specify a scheduler in the config file and in the code at the same time",),
        cause="The DeepSpeed JSON has a \"scheduler\" block while the code passes a torch LR scheduler to prepare().",
        remedy="Keep the scheduler in one place: the config with accelerate.utils.DummyScheduler in code, or your own "
        "scheduler with no scheduler block in the config.",
        refs=("https://github.com/huggingface/accelerate/pull/1909",),
        families=("accelerate_deepspeed_lifecycle",),
    ),
    KnownIssue(
        id="acc_ds_scheduler_missing",
        title="Accelerate + DeepSpeed: DummyScheduler with no scheduler in the config",
        package=_ACC,
        patterns=(r"Either specify a scheduler in the config file or pass in the .lr_scheduler_callable. parameter",
                  r"You cannot create a .DummyScheduler. without specifying a scheduler in the config file",
                  r"Found .optimizer. configured in the DeepSpeed config, but no .scheduler."),
        cause="The code passes DummyScheduler but the DeepSpeed config has no scheduler block and no "
        "lr_scheduler_callable was given.",
        remedy="Add a scheduler block to the DeepSpeed config, or DummyScheduler(optimizer, lr_scheduler_callable=...), "
        "or pass no scheduler; accelerate >= 0.23 also accepts a torch scheduler with a config optimizer.",
        refs=("https://github.com/huggingface/accelerate/pull/1909", "https://github.com/huggingface/transformers/issues/24359"),
        families=("accelerate_deepspeed_lifecycle",),
    ),
    KnownIssue(
        id="acc_ds_auto_batch_needs_dataloader",
        title="Accelerate + DeepSpeed: an 'auto' micro batch size and no dataloader in prepare",
        package=_ACC,
        patterns=(r"requires you to pass at least one of training or evaluation dataloaders with .batch_size.",),
        cause="train_micro_batch_size_per_gpu is \"auto\": Accelerate fills it from a dataloader passed to the same "
        "prepare call; none was passed.",
        remedy="Pass the training dataloader in the same accelerator.prepare call as the model, or set an integer "
        "train_micro_batch_size_per_gpu in the DeepSpeed config.",
        refs=("https://github.com/huggingface/accelerate/blob/main/src/accelerate/accelerator.py",),
        families=("accelerate_deepspeed_lifecycle",),
    ),
    KnownIssue(
        id="acc_ds_auto_value_unfilled",
        title="Accelerate + DeepSpeed: an 'auto' config value Accelerate could not fill",
        package=_ACC,
        patterns=(r"`[\w.]+` not found in kwargs\. Please specify `[\w.]+` without `auto`",),
        cause="Accelerate fills \"auto\" entries from the objects passed to one prepare call (optimizer lr from "
        "DummyOptim, scheduler steps from DummyScheduler, batch size from the dataloader); the one it needed was "
        "not in that call, e.g. the scheduler prepared in a later prepare call.",
        remedy="Prepare model, optimizer, dataloader and scheduler in one accelerator.prepare call, or write the value "
        "into the DeepSpeed config instead of \"auto\".",
        refs=("https://github.com/huggingface/accelerate/blob/main/src/accelerate/utils/dataclasses.py",),
        families=("accelerate_deepspeed_lifecycle",),
    ),
    KnownIssue(
        id="acc_ds_dummy_lr_overrides_config",
        title="Accelerate + DeepSpeed: the config lr and DummyOptim's lr disagree; the schedule peaks at DummyOptim's",
        package=_ACC,
        patterns=(),
        silent="nothing raises: the schedule quietly peaks at the other lr; the lr_agreement invariant finds it",
        cause="With a concrete optimizer lr in the DeepSpeed config and warmup_max_lr: auto, Accelerate keeps the "
        "config lr but fills warmup_max_lr from DummyOptim(lr=...), and the scheduler sets the lr it trains with.",
        remedy="Set the lr in one place: \"lr\": \"auto\" in the config (filled from DummyOptim), or the same value in "
        "both, and write warmup_max_lr explicitly when they must differ.",
        refs=("https://github.com/huggingface/accelerate/blob/main/src/accelerate/utils/dataclasses.py",),
        families=("accelerate_deepspeed_lifecycle",),
        invariants=("lr_agreement", "lr_schedule"),
    ),
    KnownIssue(
        id="acc_cpu_process_count_mismatch",
        title="Accelerate on CPU under torchrun: one process reported while DeepSpeed runs data-parallel",
        package=_ACC,
        patterns=(),
        silent="nothing raises: every rank believes it is alone; the world_size_agreement invariant finds it",
        cause="Without a GPU, Accelerate picks no distributed backend unless told (PartialState._prepare_backend), so "
        "it reports num_processes == 1 on every rank while the process group, and DeepSpeed with it, spans them all: "
        "per-process batch and step arithmetic, gather and is_main_process are then wrong.",
        remedy="Pass kwargs_handlers=[InitProcessGroupKwargs(backend=\"gloo\")] to Accelerator on CPU nodes (or launch "
        "with accelerate launch --cpu).",
        refs=("https://github.com/huggingface/accelerate/blob/main/src/accelerate/state.py",),
        families=("accelerate_deepspeed_lifecycle",),
        invariants=("world_size_agreement",),
    ),
    KnownIssue(
        id="acc_mixed_precision_conflicts_ds_config",
        title="Accelerate: --mixed_precision disagrees with the DeepSpeed config",
        package=_ACC,
        patterns=(r"--mixed_precision. arg cannot be set to .\w+. when .\w+. is set in the DeepSpeed config file",),
        cause="The precision from the accelerate config, ACCELERATE_MIXED_PRECISION or TrainingArguments differs from "
        "fp16/bf16 enabled in the DeepSpeed JSON (transformers 4.54 set bf16 by default, #39849).",
        remedy="Make them agree, or set \"fp16\": {\"enabled\": \"auto\"}, \"bf16\": {\"enabled\": \"auto\"} "
        "in the DeepSpeed config.",
        refs=("https://github.com/huggingface/transformers/issues/39849", "https://github.com/huggingface/transformers/pull/39856"),
    ),
    KnownIssue(
        id="acc_fsdp_plugin_not_configured",
        title="Accelerate: no fsdp_plugin (FSDP not enabled by the launch)",
        package=_ACC,
        patterns=(r"'AcceleratorState' object has no attribute 'fsdp_plugin'",),
        cause="AcceleratorState creates fsdp_plugin only when ACCELERATE_USE_FSDP=true (set by accelerate launch) or a "
        "FullyShardedDataParallelPlugin is passed; plain torchrun runs without FSDP.",
        remedy="accelerate launch --config_file fsdp.yaml, or Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(...)).",
        refs=("https://github.com/huggingface/accelerate/issues/1893", "https://github.com/huggingface/accelerate/issues/2973"),
    ),
    KnownIssue(
        id="acc_quantized_model_wrong_device",
        title="Accelerate: a 4/8-bit model loaded on another device than the rank trains on",
        package=_ACC,
        patterns=(r"You can't train a model that has been loaded in (8-bit|8-bit or 4-bit) precision "
                  r"(on a different device|on multiple devices|with CPU or disk offload)",),
        cause="Under DDP each rank needs a full quantized copy on its own GPU, but the model was loaded with "
        "device_map=\"auto\" (spread over GPUs or all on GPU 0).",
        remedy="Load per rank with device_map={\"\": accelerator.process_index}; for a model larger than one GPU run one "
        "process with device_map=\"auto\" and no distributed launcher.",
        refs=("https://github.com/huggingface/accelerate/issues/1840", "https://github.com/huggingface/accelerate/pull/1523"),
    ),
    KnownIssue(
        id="prodigy_group_tensors_left_on_cpu",
        title="Optimizer tensors kept in param_groups stay on the CPU after Accelerate load_state",
        package="prodigy-plus-schedule-free",
        # on a GPU the first step after the resume fails with a device mismatch inside the optimizer's own code
        # (on CPU it stays silent: the optimizer_state_colocation invariant finds it after load)
        patterns=(r"Expected all tensors to be on the same device",),
        requires=(r"prodigyplus[/\\]|prodigy_plus_schedule_free",),
        cause="accelerator.load_state loads optimizer state with map_location=\"cpu\" by default and torch's "
        "Optimizer.load_state_dict casts only per-parameter state to the parameters' device; tensors an optimizer "
        "keeps inside param_groups (prodigy-plus-schedule-free's running_d_numerator / running_d_denom) stay on the "
        "CPU. Releases up to 1.8.x have no guard; 1.9.2 and later move them back lazily on access.",
        remedy="Upgrade prodigy-plus-schedule-free (>= 1.9.2); or after load_state move each group's tensors to the "
        "device of its first parameter; or load_state(..., map_location=\"on_device\").",
        refs=("https://github.com/LoganBooker/prodigy-plus-schedule-free", "https://github.com/huggingface/accelerate/pull/1220"),
        affected="<1.9.2",
        fixed_in="1.9.2",
        families=("optimizer_state_placement",),
        invariants=("optimizer_state_colocation",),
    ),
    KnownIssue(
        id="hf_trainer_ds_config_mismatch",
        title="transformers Trainer: DeepSpeed config values disagree with TrainingArguments",
        package="transformers",
        patterns=(r"Please correct the following DeepSpeed config values that mismatch TrainingArguments values",),
        cause="Hard-coded values in the DeepSpeed JSON (batch sizes, accumulation, clipping, lr, precision) differ from "
        "TrainingArguments; quoted numbers (\"8\") count as different.",
        remedy="Set those DeepSpeed keys to \"auto\" or make them equal (as numbers).",
        refs=("https://github.com/huggingface/transformers/pull/12021", "https://github.com/hiyouga/LlamaFactory/issues/1116"),
    ),
    KnownIssue(
        id="acc_dispatch_unties_weights",
        title="dispatch_model (or device-map loading) unties weights: the LM head stops sharing the embedding",
        package="accelerate",
        patterns=(),
        silent="nothing raises: the head and the embedding train apart and are saved twice; ties_kept finds it",
        cause="Placing a model's parameters by a device map assigns new tensors per module; a parameter two modules "
        "shared (an LM head tied to the input embedding) becomes two tensors unless the tie is restored afterwards. "
        "transformers' loading hit the same when it copied weights into new tensors for a dtype or device change.",
        remedy="Call model.tie_weights() after dispatch_model / load_checkpoint_and_dispatch (and after any manual "
        "re-assignment), and check lm_head.weight is model.get_input_embeddings().weight before training or saving.",
        refs=("https://github.com/huggingface/accelerate/issues/993", "https://github.com/huggingface/transformers/pull/33913"),
        invariants=("ties_kept",),
    ),
    KnownIssue(
        id="buffer_off_compute_device",
        title="A buffer left on meta or the CPU after meta-device init, zero.Init or dispatch (rotary inv_freq, masks)",
        package="transformers",
        patterns=(),
        silent="on meta nothing raises before a forward, and once materialised with to_empty the buffer silently "
        "holds uninitialised memory (non-persistent buffers are in no checkpoint); buffer_placement finds it",
        cause="Buffers are not parameters: meta-device init, init_empty_weights, zero.Init and device maps handle "
        "parameters, and non-persistent buffers such as rotary inv_freq are neither saved nor loaded, so nothing "
        "puts them on the compute device with real values.",
        remedy="Recompute non-persistent buffers after materialising the module (re-run the rotary module's init, or "
        "the model's _init_weights on it) and move the whole module, buffers included, before wrapping.",
        refs=("https://github.com/huggingface/transformers/issues/34234", "https://github.com/huggingface/transformers/issues/45902",
              "https://github.com/pytorch/torchtitan/issues/4783"),
        invariants=("buffer_placement",),
    ),
)

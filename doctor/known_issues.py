"""Known upstream issues: signatures, affected versions, remedies, references, and one classifier.

Entries are written from the upstream threads (see shared/KNOWN_ISSUES.md for the raw notes);
version ranges are PEP 440 specifiers on the named distribution. `classify` matches any error
text (message, traceback, stderr tail) against every entry.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

AFFECTED = "affected"
NOT_AFFECTED = "not_affected"
UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class KnownIssue:
    id: str
    title: str
    package: str  # distribution whose version decides the verdict
    patterns: tuple[str, ...]  # any one matching the error text is a hit...
    cause: str
    remedy: str
    refs: tuple[str, ...]
    requires: tuple[str, ...] = ()  # ...provided all of these match too (frames that disambiguate)
    affected: str = ""  # PEP 440 specifier; "" = every version (environmental or by design)
    fixed_in: str | None = None
    families: tuple[str, ...] = ()
    invariants: tuple[str, ...] = ()  # invariants whose error findings show this issue

    def matches(self, text: str) -> bool:
        flags = re.MULTILINE | re.DOTALL
        if not any(re.search(p, text, flags) for p in self.patterns):
            return False
        return all(re.search(p, text, flags) for p in self.requires)

    def version_verdict(self, versions: Mapping[str, str | None]) -> str:
        """affected / not_affected by the installed version; unknown where it cannot tell."""
        installed = versions.get(self.package)
        if not installed or not self.affected:
            return UNKNOWN
        try:
            version = Version(installed)
            return AFFECTED if SpecifierSet(self.affected).contains(version, prereleases=True) else NOT_AFFECTED
        except (InvalidVersion, InvalidSpecifier):
            return UNKNOWN

    def to_ref(self, verdict: str) -> dict[str, object]:
        """The `known_issue` object of a case result."""
        return {
            "id": self.id,
            "title": self.title,
            "verdict": verdict,
            "affected_versions": f"{self.package} {self.affected}" if self.affected else f"{self.package} (any)",
            "fixed_in": self.fixed_in,
            "remedy": self.remedy,
            "refs": list(self.refs),
        }


_DS = "deepspeed"
_ACC = "accelerate"

ISSUES: tuple[KnownIssue, ...] = (
    KnownIssue(
        id="ds_z3_offload_gradnorm_device_mismatch",
        title="ZeRO-3 + optimizer offload: grad norm on the GPU, gradients on the CPU in unscale_and_clip_grads",
        package=_DS,
        patterns=(r"Expected all tensors to be on the same device, but found at least two devices, "
                  r"(cuda|xpu|npu|hpu)(:\d+)? and cpu",
                  r"Expected all tensors to be on the same device, but found at least two devices, cpu and (cuda|xpu|npu|hpu)"),
        requires=(r"stage3\.py.*(unscale_and_clip_grads|step)|unscale_and_clip_grads",),
        cause="DeepSpeed 0.14.1-0.14.2 computed the scaled global grad norm as a 0-dim accelerator tensor "
        "(PR #5256) and multiplied it into fp32 gradients that optimizer offload keeps on the CPU.",
        remedy="Upgrade DeepSpeed to >= 0.14.3 (the change was reverted in #5461 and fixed in #5493), or pin 0.14.0. "
        "Stop-gap from the thread: patch `grad.mul_(1. / combined_scale.item())`, or offload only parameters.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/5538", "https://github.com/deepspeedai/DeepSpeed/issues/5422",
              "https://github.com/deepspeedai/DeepSpeed/issues/5469", "https://github.com/deepspeedai/DeepSpeed/pull/5461",
              "https://github.com/deepspeedai/DeepSpeed/pull/5493"),
        affected=">=0.14.1,<0.14.3",
        fixed_in="0.14.3",
        families=("zero_offload",),
        invariants=("clip_norm_device",),
    ),
    KnownIssue(
        id="ds_offload_client_optimizer_rejected",
        title="ZeRO-Offload refuses a client optimizer that is not DeepSpeedCPUAdam",
        package=_DS,
        patterns=(r"You are using ZeRO-Offload with a client provided optimizer",),
        cause="offload_optimizer is on and the optimizer passed to deepspeed.initialize (directly, through the HF "
        "Trainer or Accelerate) is not a DeepSpeed CPU optimizer; the check exists since 0.8.3 (PR #2971).",
        remedy="Declare the optimizer in the DeepSpeed config, or pass deepspeed.ops.adam.DeepSpeedCPUAdam, or set "
        'top-level "zero_force_ds_cpu_optimizer": false if you accept the slowdown.',
        refs=("https://github.com/deepspeedai/DeepSpeed/pull/2971", "https://github.com/deepspeedai/DeepSpeed/issues/7524"),
        affected=">=0.8.3",
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_cpu_adam_build_failed",
        title="DeepSpeedCPUAdam has no ds_opt_adam: the cpu_adam op failed to build or load",
        package=_DS,
        patterns=(r"'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'",),
        cause="A secondary error from DeepSpeedCPUAdam.__del__: CPUAdamBuilder().load() raised first (compiler, "
        "CUDA mismatch, ninja), so the op handle was never set. The first exception above it is the real one.",
        remedy="Read the first exception in the log; pre-build the op (DS_BUILD_CPU_ADAM=1 pip install deepspeed) or "
        "clear ~/.cache/torch_extensions/<py_cu>/cpu_adam and rebuild.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/1077", "https://github.com/deepspeedai/DeepSpeed/issues/1846"),
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_op_builder_cuda_mismatch",
        title="DeepSpeed op builder: system CUDA does not match torch's CUDA",
        package=_DS,
        patterns=(r"Installed CUDA version \S+ does not match the version torch was compiled with \S+"
                  r"(?!.*accepting this combination)",
                  r"CUDA_HOME does not exist, unable to compile CUDA op"),
        cause="The nvcc under CUDA_HOME has another CUDA major version than the torch wheel, so DeepSpeed refuses "
        "to JIT-compile its ops.",
        remedy="Install a CUDA toolkit matching torch's CUDA major (or a matching torch) and point CUDA_HOME at it; "
        "DS_SKIP_CUDA_CHECK=1 skips the check at your own risk.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/3223", "https://github.com/deepspeedai/DeepSpeed/pull/3436"),
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_jit_ninja_missing",
        title="Ninja is required to JIT-build DeepSpeed ops",
        package=_DS,
        patterns=(r"Ninja is required to load C\+\+ extensions",),
        cause="The ninja executable is not on the PATH of the process that compiles the op (not installed, or a "
        "venv whose bin/ is not on the launched ranks' PATH).",
        remedy="pip install ninja in the training environment and make sure its bin/ is on PATH for every rank "
        "(check `ninja --version; echo $?`), or pre-build the ops at install time.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/1687",),
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_jit_build_stale_lock",
        title="DeepSpeed op build waits forever on a stale torch_extensions lock",
        package="torch",
        patterns=(r"file_baton\.py.*wait",),
        cause="An earlier compile was killed and left a `lock` file in ~/.cache/torch_extensions/<py_cu>/<op>; "
        "later builds spin on it.",
        remedy="Delete the stale lock (or the op's cache directory) and rerun; give concurrent jobs their own "
        "TORCH_EXTENSIONS_DIR.",
        refs=("https://github.com/pytorch/pytorch/issues/189245", "https://github.com/huggingface/transformers/issues/12715"),
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_fp16_loss_scale_at_minimum",
        title="fp16 loss scale already at minimum",
        package=_DS,
        patterns=(r"Current loss scale already at minimum - cannot decrease scale anymore",),
        cause="fp16 gradients overflow on every step, so the dynamic loss scaler halves down to min_loss_scale.",
        remedy="Use bf16 where the hardware has it; otherwise tune the fp16 block (lower initial_scale_power, or a "
        "fixed loss_scale); overflow from step 1 usually means a data or model problem.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/2273", "https://github.com/deepspeedai/DeepSpeedExamples/issues/418"),
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_ckpt_torch26_weights_only",
        title="torch >= 2.6 weights_only load refuses DeepSpeed checkpoint objects",
        package=_DS,
        patterns=(r"Weights only load failed",),
        requires=(r"Unsupported global: GLOBAL deepspeed\.",),
        cause="torch 2.6 made weights_only=True the default of torch.load; DeepSpeed checkpoints pickle DeepSpeed "
        "objects (loss scaler, ZeroStageEnum).",
        remedy="Upgrade DeepSpeed to >= 0.16 (PR #6751 passes weights_only explicitly) and the wrapper that loads; "
        "for trusted files pass weights_only=False or add_safe_globals.",
        refs=("https://github.com/deepspeedai/DeepSpeed/pull/6751", "https://github.com/deepspeedai/DeepSpeed/issues/8500"),
        affected="<0.16.0",
        fixed_in="0.16.0",
    ),
    KnownIssue(
        id="ds_frozen_param_not_in_param_names",
        title="Checkpoint save: a frozen parameter is missing from the engine's name map",
        package=_DS,
        patterns=(r"failed to find frozen .* in named params",),
        cause="deepspeed.initialize builds engine.param_names keyed by Parameter object. Replacing parameter objects "
        "afterwards (accelerate.dispatch_model, set_module_tensor_to_device(value=...), load_state_dict(assign=True)) "
        "leaves the map stale; ZeRO >= 2 looks every frozen parameter up in it when saving "
        "(_get_zero_frozen_param_attributes) and raises.",
        remedy="Place or dispatch the model before deepspeed.initialize / accelerator.prepare. If parameters must be "
        "replaced afterwards, rebuild the map: engine.param_names = {p: n for n, p in engine.module.named_parameters()}; "
        "or save with save_checkpoint(..., exclude_frozen_parameters=True) and keep the frozen weights elsewhere.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/6620", "https://github.com/deepspeedai/DeepSpeed/pull/3205",
              "https://github.com/deepspeedai/DeepSpeed/pull/3953", "https://github.com/deepspeedai/DeepSpeed/issues/5439"),
        families=("frozen_param_names",),
        invariants=("param_name_map",),
    ),
    KnownIssue(
        id="ds_z3_param_replaced_after_init",
        title="ZeRO-3: a parameter replaced after initialize is not a ZeRO-3 parameter",
        package=_DS,
        patterns=(r"'Parameter' object has no attribute 'ds_(active_sub_modules|status|id|numel|shape|tensor|summary)'",),
        cause="ZeRO-3 attaches its partitioning state (ds_id, ds_status, ds_tensor, ds_active_sub_modules) to the "
        "Parameter objects it saw at initialize. A Parameter put in their place later (dispatch_model, "
        "set_module_tensor_to_device(value=...), load_state_dict(assign=True)) has none of it, and the next gather, "
        "release or checkpoint save fails on it.",
        remedy="Do every parameter replacement (device dispatch, weight loading with assign=True, PEFT surgery) before "
        "deepspeed.initialize / accelerator.prepare; to change values afterwards, copy in place inside "
        "deepspeed.zero.GatheredParameters(params, modifier_rank=0).",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/6620", "https://github.com/deepspeedai/DeepSpeed/issues/846"),
        families=("frozen_param_names",),
        invariants=("param_name_map", "optimizer_params_live"),
    ),
    KnownIssue(
        id="ds_ckpt_meta_params_saved",
        title="Checkpoint holds meta tensors: weights dispatched to disk after initialize are saved without data",
        package=_DS,
        patterns=(),  # silent: found by the no_meta_params invariant and by reading the saved file
        cause="accelerate.dispatch_model with a \"disk\" entry leaves meta placeholders on the module (the data lives in "
        "the offload folder, loaded by hooks at forward). ZeRO 0/1 save module.state_dict() as it is, so the "
        "checkpoint stores meta tensors: no data, no error.",
        remedy="Dispatch before deepspeed.initialize, or do not offload a model you train to disk; materialise the "
        "offloaded weights before saving (remove the hooks and load them from the offload folder).",
        refs=("https://github.com/huggingface/accelerate/issues/3866", "https://github.com/huggingface/accelerate/pull/4261",
              "https://github.com/deepspeedai/DeepSpeed/issues/6620"),
        families=("frozen_param_names",),
        invariants=("no_meta_params",),
    ),
    KnownIssue(
        id="ds_replaced_trainable_param_not_trained",
        title="A trainable parameter replaced after initialize stops training (silently, or ZeRO 1/2 cannot reduce)",
        package="torch",
        # mostly silent (the optimizer_params_live invariant and a step that changes nothing find it); with every
        # trainable parameter replaced, ZeRO 1/2's gradient reduction finds an empty bucket list:
        patterns=(r"IndexError: list index out of range",),
        requires=(r"reduce_ipg_grads",),
        cause="The optimizer (and ZeRO's bit16 groups and gradient hooks) keep the Parameter objects they were given; "
        "after load_state_dict(assign=True) or set_module_tensor_to_device(value=...) the module computes with new "
        "objects the optimizer never sees, so steps update an orphan and the model's weights stay put (or, with no "
        "hooked parameter left, ZeRO 1/2 fails in reduce_ipg_grads).",
        remedy="Load or move weights before building the optimizer / engine; afterwards copy values in place "
        "(load_state_dict without assign, or `with torch.no_grad(): p.copy_(value)`).",
        refs=("https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.load_state_dict",
              "https://github.com/huggingface/accelerate/issues/3256"),
        families=("frozen_param_names",),
        invariants=("optimizer_params_live",),
    ),
    KnownIssue(
        id="ds_z3_free_param_still_active",
        title="ZeRO-3 frees a parameter a submodule still holds",
        package=_DS,
        patterns=(r"assert not param\.ds_active_sub_modules", r"Cannot free a ZeRO-3 parameter while it is still active",
                  r"'active_sub_modules': \{\d+"),
        cause="A parameter was re-partitioned while a submodule still used it, typically after modifying parameters "
        "inside GatheredParameters with modifier_rank=None.",
        remedy="Pass modifier_rank=0 (or another rank) to GatheredParameters when modifying; use the engine's save APIs "
        "rather than gathering by hand.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/7811", "https://github.com/deepspeedai/DeepSpeed/pull/7817"),
    ),
    KnownIssue(
        id="ds_z3_param_not_available_on_fetch",
        title="ZeRO-3 fetched a parameter that was not gathered",
        package=_DS,
        patterns=(r"assert param\.ds_status == ZeroParamStatus\.AVAILABLE", r"'status': 'NOT_AVAILABLE'.*'active_sub_modules'"),
        cause="The prefetch trace expected another submodule order (generation loops, several forwards per step, "
        "conditional branches), or a zero-sized trainable parameter was never all-gathered.",
        remedy="Keep extra forwards inside the engine's module order; look for zero-sized parameters; no maintainer fix "
        "is stated upstream.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/4533", "https://github.com/deepspeedai/DeepSpeed/pull/6557"),
    ),
    KnownIssue(
        id="ds_ckpt_dp_world_size_changed",
        title="ZeRO checkpoint resumed with another data-parallel size",
        package=_DS,
        patterns=(r"The checkpoint being loaded used a DP world size of \d+ but the current world size is \d+",),
        cause="ZeRO optimizer state is saved per data-parallel rank and cannot be resumed at another size unless it is "
        "loaded as a universal checkpoint.",
        remedy="Resume with the same DP size; or load weights only (load_optimizer_states=False); or convert with "
        "ds_to_universal.py and set checkpoint.load_universal.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/3810", "https://github.com/deepspeedai/DeepSpeed/pull/4516"),
    ),
    KnownIssue(
        id="ds_z3_ds_grads_remaining_attr_missing",
        title="ZeRO-3 hooks on attribute-delegating wrappers (PEFT modules_to_save)",
        package=_DS,
        patterns=(r"object has no attribute 'ds_grads_remaining'",),
        cause="Hook registration tested hasattr(module, 'post_bwd_fn'); wrappers that forward __getattr__ to a child "
        "looked already hooked and read the child's uninitialised counter.",
        remedy="Upgrade DeepSpeed to >= 0.19.3 (PR #8144).",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/7203", "https://github.com/deepspeedai/DeepSpeed/pull/8144"),
        affected="<0.19.3",
        fixed_in="0.19.3",
    ),
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
        patterns=(),  # silent: found by the lr_agreement invariant
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
        patterns=(),  # silent: found by the world_size_agreement invariant
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
        id="fsdp_optimizer_built_before_wrap",
        title="FSDP: an optimizer built before wrapping tracks orphans and nothing trains",
        package="torch",
        patterns=(),  # silent: the tracked_live / step_changes invariants find it
        cause="FSDP1 without use_orig_params replaces each unit's parameters by a FlatParameter, and FSDP2 replaces "
        "them by DTensor parameters; an optimizer built on the originals keeps stepping tensors the model no longer "
        "uses, so loss stays flat and no weight changes. FSDP1 with use_orig_params=True keeps the original objects.",
        remedy="Build the optimizer after wrapping, from the wrapped model's parameters; with Accelerate prepare the "
        "model first (or use fsdp_use_orig_params: true so prepare can remap an optimizer built earlier).",
        refs=("https://github.com/facebookresearch/fairscale/issues/423", "https://github.com/huggingface/accelerate/issues/3256",
              "https://github.com/pytorch/pytorch/issues/149205"),
        families=("optimizer_coverage",),
        invariants=("tracked_live", "step_changes"),
    ),
    KnownIssue(
        id="composer_single_group_rebuild",
        title="Composer FSDP: a one-group optimizer is rebuilt over every model parameter",
        package="mosaicml",
        patterns=(),  # silent: the tracked_set invariant finds it
        cause="When the optimizer had a single param group, Composer's FSDP preparation rebuilt it from "
        "model.parameters() instead of the original group, so parameters left out on purpose (and frozen ones) were "
        "tracked and updated after wrapping.",
        remedy="Upgrade Composer past PR #3502 (it maps the group by name with use_orig_params=True); meanwhile set "
        "requires_grad=False on what must not train, or use more than one param group.",
        refs=("https://github.com/mosaicml/composer/issues/3493", "https://github.com/mosaicml/composer/pull/3502"),
        families=("optimizer_coverage",),
        invariants=("tracked_set",),
    ),
    KnownIssue(
        id="fsdp2_optimizer_built_after_forward",
        title="FSDP2: an optimizer built after a forward captures unsharded parameters",
        package="torch",
        patterns=(),  # silent
        cause="After a forward the FSDP2 root keeps its parameters unsharded, so an optimizer built at that moment "
        "captures the unsharded tensors instead of the sharded DTensor parameters.",
        remedy="Create the optimizer right after fully_shard and before any forward, or call model.reshard() first.",
        refs=("https://github.com/pytorch/pytorch/issues/149205", "https://github.com/pytorch/pytorch/issues/154655"),
        invariants=("tracked_live", "step_changes"),
    ),
    KnownIssue(
        id="fsdp1_flatparam_mixed_requires_grad",
        title="FSDP1: one FlatParameter over frozen and trainable parameters",
        package="torch",
        patterns=(r"Must flatten tensors with uniform requires_grad", r".FlatParameter. requires uniform .requires_grad."),
        cause="With use_orig_params=False a FlatParameter must be all frozen or all trainable; the wrap unit mixes them "
        "(LoRA/PEFT, partial freezing).",
        remedy="use_orig_params=True, or a wrap policy that puts frozen and trainable parameters in separate units.",
        refs=("https://github.com/pytorch/pytorch/issues/104690", "https://github.com/pytorch/pytorch/pull/98221"),
    ),
    KnownIssue(
        id="fsdp1_flatparam_mixed_dtype",
        title="FSDP1: one FlatParameter over parameters of different dtypes",
        package="torch",
        patterns=(r"Must flatten tensors with uniform dtype but got", r".FlatParameter. requires uniform dtype but got"),
        cause="Parameters of one FSDP unit have different dtypes (fp32 adapters on a bf16 base, mixed vision towers).",
        remedy="Cast the unit's parameters to one dtype before wrapping, or use use_orig_params=True with a recent torch.",
        refs=("https://github.com/huggingface/peft/issues/484", "https://github.com/huggingface/trl/issues/1723"),
    ),
    KnownIssue(
        id="fsdp1_submodule_called_outside_root_forward",
        title="FSDP: a submodule run outside the root forward sees its flat shard",
        package="torch",
        patterns=(r"'weight' must be 2-D", r"weight should have at least three dimensions"),
        requires=(r"(?i)fsdp|fully_sharded|_flat_param",),
        cause="FSDP gathers parameters in each unit's pre-forward hook; calling a contained submodule directly (or "
        "generate) bypasses it and the module sees the sharded 1-D view.",
        remedy="Call the root module's forward; wrap generation in FSDP.summon_full_params(model).",
        refs=("https://github.com/pytorch/pytorch/issues/100069", "https://github.com/pytorch/pytorch/pull/86343"),
    ),
    KnownIssue(
        id="fsdp2_mixed_tensor_dtensor",
        title="FSDP2 / DTensor: an op got a plain tensor and a DTensor",
        package="torch",
        patterns=(r"got mixed torch\.Tensor and DTensor, need to convert all",),
        cause="User code (or a framework path: activation checkpointing with two forwards, clip_grad_norm_ over mixed "
        "gradients) combined a regular tensor with a DTensor.",
        remedy="Convert with DTensor.from_local(t, placements=(Replicate(),)); call the root forward; avoid several "
        "forwards before one backward with activation checkpointing.",
        refs=("https://github.com/pytorch/pytorch/issues/153354", "https://github.com/huggingface/accelerate/pull/4219"),
    ),
    KnownIssue(
        id="fsdp1_sharded_state_dict_with_no_shard",
        title="FSDP1: sharded_state_dict with a non-sharding strategy",
        package="torch",
        patterns=(r"(sharded_state_dict|local_state_dict).{0,40}can only be (used|called) when parameters are flatten "
                  r"and sharded",),
        cause="SHARDED_STATE_DICT needs flat, sharded parameters; NO_SHARD (or a single rank) has none.",
        remedy="Use FULL_STATE_DICT with NO_SHARD, or a sharding strategy with SHARDED_STATE_DICT.",
        refs=("https://github.com/pytorch/pytorch/issues/95563",),
    ),
    KnownIssue(
        id="prodigy_group_tensors_left_on_cpu",
        title="Optimizer tensors kept in param_groups stay on the CPU after Accelerate load_state",
        package="prodigy-plus-schedule-free",
        patterns=(),  # silent until a step on a GPU: the optimizer_state_colocation invariant finds it after load
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
        id="torchrun_rendezvous_unreachable",
        title="torchrun rendezvous endpoint unreachable",
        package="torch",
        patterns=(r"RendezvousConnectionError: The connection to the C10d store has failed", r"RendezvousTimeoutError",
                  r"client socket has timed out after \d+s while trying to connect to"),
        cause="The nodes cannot reach the rendezvous address (firewall, wrong interface, unresolvable host name) or "
        "did not start within the join timeout.",
        remedy="Check `nc -z <endpoint> <port>` from every node; use an IP reachable from all nodes; start all nodes "
        "with identical --nnodes/--rdzv-id/--rdzv-backend.",
        refs=("https://github.com/pytorch/pytorch/issues/64926", "https://github.com/pytorch/pytorch/pull/139702"),
    ),
    KnownIssue(
        id="torchrun_port_in_use",
        title="Rendezvous port already in use",
        package="torch",
        patterns=(r"server socket has failed to (listen on any local network address|bind to)"
                  r".*(EADDRINUSE|Address already in use)",),
        cause="Another process on the host already holds the master/rendezvous port (torchrun's default is 29500).",
        remedy="Pick a free --master-port, or --rdzv-endpoint localhost:0 on a single node; kill stale processes.",
        refs=("https://github.com/pytorch/pytorch/issues/73320",),
    ),
    KnownIssue(
        id="nccl_shm_system_error",
        title="NCCL unhandled system error (usually /dev/shm too small)",
        package="torch",
        patterns=(r"unhandled system error",),
        requires=(r"NCCL",),
        cause="NCCL could not create its shared-memory segment (containers default /dev/shm to 64 MB) or another "
        "system call failed.",
        remedy="Run the container with --shm-size=1g or --ipc=host; NCCL_DEBUG=INFO shows the failing call; "
        "NCCL_SHM_DISABLE=1 as a slow fallback.",
        refs=("https://github.com/NVIDIA/nccl/issues/342", "https://github.com/pytorch/pytorch/issues/37004"),
    ),
    KnownIssue(
        id="nccl_duplicate_gpu",
        title="NCCL: two ranks on one GPU",
        package="torch",
        patterns=(r"Duplicate GPU detected : rank \d+ and rank \d+ both on CUDA device",),
        cause="Two ranks use the same physical GPU: no torch.cuda.set_device(LOCAL_RANK), more ranks than GPUs, or "
        "CUDA_VISIBLE_DEVICES changed after CUDA was initialised.",
        remedy="torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before init_process_group; keep ranks <= GPUs.",
        refs=("https://github.com/pytorch/pytorch/issues/129385",),
    ),
    KnownIssue(
        id="nccl_watchdog_timeout",
        title="NCCL watchdog: collective timed out",
        package="torch",
        patterns=(r"Watchdog caught collective operation timeout",),
        cause="A rank did not enter or finish the same collective within the process-group timeout (slow rank-local "
        "work, mismatched collectives, or a hung peer).",
        remedy="Find the rank that did not arrive (compare OpType/NumelIn across ranks); move rank-local work out of "
        "the distributed section; raise the timeout only when the work is legitimately slow.",
        refs=("https://github.com/pytorch/pytorch/issues/97191",),
    ),
    KnownIssue(
        id="torchrun_child_sigkill",
        title="A rank was SIGKILLed (usually the host OOM killer)",
        package="torch",
        patterns=(r"exitcode\s*:\s*-9\b", r"Signal 9 \(SIGKILL\)", r"\bSIGKILL\b"),
        cause="The worker was killed from outside, most often by the kernel OOM killer when every rank materialises "
        "the model in host RAM.",
        remedy="Check dmesg / the cgroup's OOM events; reduce host memory per rank (RAM-efficient loading, fewer "
        "dataloader workers).",
        refs=("https://github.com/meta-pytorch/torchtune/issues/1710",),
    ),
)

_BY_ID = {issue.id: issue for issue in ISSUES}
if len(_BY_ID) != len(ISSUES):  # pragma: no cover - guards the table above
    raise RuntimeError("duplicate known-issue id")


def get(issue_id: str) -> KnownIssue:
    return _BY_ID[issue_id]


def classify(text: str, issues: Iterable[KnownIssue] = ISSUES) -> list[KnownIssue]:
    """Known issues whose signature matches an error text, most specific (most patterns required) first."""
    hits = [issue for issue in issues if text and issue.matches(text)]
    return sorted(hits, key=lambda issue: -len(issue.requires))


@dataclasses.dataclass(frozen=True)
class RaisedError:
    """An exception a probe caught on purpose, as text and as what the classifier made of it."""

    type: str
    first_line: str  # the message's first line, at most 300 characters
    traceback: str
    hits: tuple[KnownIssue, ...]

    @classmethod
    def of(cls, exc: BaseException) -> RaisedError:
        import traceback

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        first_line = (str(exc).splitlines() or [""])[0][:300]
        return cls(type(exc).__name__, first_line, text, tuple(classify(text)))

    @property
    def summary(self) -> str:
        return f"{self.type}: {self.first_line}"

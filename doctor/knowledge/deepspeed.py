"""Known issues of DeepSpeed: ZeRO offload and partitioning (S2), parameter-name maps and checkpoints (S1), op builds.

Entries are written from the upstream threads (see shared/KNOWN_ISSUES.md for the raw notes).
"""

from __future__ import annotations

from doctor.knowledge.issues import KnownIssue

_DS = "deepspeed"

DEEPSPEED: tuple[KnownIssue, ...] = (
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
        # silent at save (the no_meta_params invariant finds it); loading that checkpoint is what fails
        patterns=(r"Cannot copy out of meta tensor; no data",),
        requires=(r"(?i)deepspeed|mp_rank_\d+_model_states",),
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
        id="ds_import_torch_private_removed",
        title="import deepspeed fails: it imports a torch private that torch 2.4 removed",
        package=_DS,
        patterns=(r"cannot import name '(_get_socket_with_port|log)' from 'torch\.distributed\.elastic\.agent\.server\.api'",),
        cause="deepspeed/elasticity/elastic_agent.py (imported by `import deepspeed`) took `_get_socket_with_port` and "
        "`log` from torch's elastic agent; torch 2.4 removed them (pytorch#125743), so DeepSpeed < 0.14.4 does not "
        "import at all under a newer torch. Seen live on an H100 node with deepspeed 0.14.2 and torch 2.11.",
        remedy="Upgrade DeepSpeed to >= 0.14.4 (PR #5654), or pair an old DeepSpeed with torch < 2.4.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/5603", "https://github.com/deepspeedai/DeepSpeed/pull/5654",
              "https://github.com/pytorch/pytorch/pull/125743"),
        affected="<0.14.4",
        fixed_in="0.14.4",
    ),
    KnownIssue(
        id="ds_import_numpy2_bufsize",
        title="import deepspeed fails under numpy 2: `from numpy import BUFSIZE`",
        package=_DS,
        patterns=(r"cannot import name 'BUFSIZE' from 'numpy'",),
        cause="deepspeed/autotuning/scheduler.py (imported by `import deepspeed`) imported numpy.BUFSIZE, which numpy "
        "2.0 removed; DeepSpeed < 0.14.4 does not import beside numpy >= 2.",
        remedy="Upgrade DeepSpeed to >= 0.14.4 (PR #5686), or pin numpy < 2 beside the old DeepSpeed.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/5671", "https://github.com/deepspeedai/DeepSpeed/pull/5686"),
        affected="<0.14.4",
        fixed_in="0.14.4",
    ),
    KnownIssue(
        id="ds_cuda_arch_variant_suffix",
        title="DeepSpeed's op builder cannot parse an arch-specific TORCH_CUDA_ARCH_LIST entry (9.0a, 10.0a)",
        package=_DS,
        patterns=(r"invalid literal for int\(\) with base 10: '\d*[a-z]'",),
        requires=(r"op_builder|builder\.py|cpp_extension",),
        cause="The JIT builder sorts TORCH_CUDA_ARCH_LIST by int() of each part; torch accepts arch-specific targets "
        "(`9.0a` for Hopper's wgmma), which fail there before anything compiles. Seen live on an H100 image that "
        "exports TORCH_CUDA_ARCH_LIST=9.0a (deepspeed 0.19.8, torch 2.11).",
        remedy="Build DeepSpeed's ops with the plain capability: TORCH_CUDA_ARCH_LIST=9.0 (or \"9.0+PTX\") for the job, "
        "or pre-build the ops (DS_BUILD_CPU_ADAM=1 ...) with it; PR #8619 keeps the suffix.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/7589", "https://github.com/deepspeedai/DeepSpeed/pull/8619",
              "https://github.com/pytorch/pytorch/issues/144037"),
        families=("zero_offload",),
    ),
)

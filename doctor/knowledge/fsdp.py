"""Known issues of FSDP1/FSDP2 and Composer: optimizers built around wrapping (S3), flat-parameter limits, state dicts.

Entries are written from the upstream threads (see shared/KNOWN_ISSUES.md for the raw notes).
"""

from __future__ import annotations

from doctor.knowledge.issues import KnownIssue

FSDP: tuple[KnownIssue, ...] = (
    KnownIssue(
        id="fsdp_optimizer_built_before_wrap",
        title="FSDP: an optimizer built before wrapping tracks orphans and nothing trains",
        package="torch",
        patterns=(),
        silent="nothing raises: the loss stays flat; the tracked_live and step_changes invariants find it",
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
        patterns=(),
        silent="nothing raises: excluded parameters train; the tracked_set invariant finds it",
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
        patterns=(),
        silent="nothing raises: the optimizer steps unsharded copies; tracked_live and step_changes find it",
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
)

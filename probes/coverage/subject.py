"""The model an optimizer_coverage (S3) case wraps, and the optimizer group it builds: ds-doctor's four-part model
(`a` trainable and in the group, `b` trainable and left out on purpose, `c` frozen, `head` in the group), or the
user's (`--model`) with its group chosen by rule; and the user's DeepSpeed config for the DeepSpeed route."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ds_doctor.plugins import DeepSpeedConfigNote, ProbeContext
from ds_doctor.plugins.collect import clean_name
from ds_doctor.plugins.usersetup import UserConfig, change_findings, fill

WIDTH = 8
OUT = 4
MICRO_BATCH = 2
INTENDED = ("a.bias", "a.weight", "head.bias", "head.weight")
FROZEN = ("c.bias", "c.weight")


def build_model(seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Sequential()
    model.add_module("a", torch.nn.Linear(WIDTH, WIDTH))
    model.add_module("act", torch.nn.ReLU())
    model.add_module("b", torch.nn.Linear(WIDTH, WIDTH))
    model.add_module("c", torch.nn.Linear(WIDTH, WIDTH))
    model.add_module("head", torch.nn.Linear(WIDTH, OUT))
    model.c.requires_grad_(False)
    return model


GROUP = ("a", "head")


def make_optimizer(module: Any, parts: tuple[str, ...] = GROUP) -> Any:
    """One AdamW group over the parameters of `parts` (by original name)."""
    import torch

    return torch.optim.AdamW(
        [p for n, p in module.named_parameters() if clean_name(n).split(".")[0] in parts], lr=1e-2
    )


def grouped_optimizer(module: Any, parts: tuple[str, ...]) -> Any:
    """One AdamW group per part: the remedy Composer's single-group rebuild leaves alone."""
    import torch

    return torch.optim.AdamW(
        [
            {"params": [p for n, p in module.named_parameters() if clean_name(n).split(".")[0] == part]}
            for part in parts
        ],
        lr=1e-2,
    )


@dataclasses.dataclass
class Subject:
    """The model a case wraps, and by which rule its one optimizer group is chosen."""

    build: Callable[[int], Any]  # seed -> a fresh module, frozen parts frozen
    in_group: Callable[[str], bool]  # an original parameter name -> whether the group holds it
    intended: tuple[str, ...]  # what one step must change
    frozen: tuple[str, ...]
    user: Any = None  # the user's Trainable (`--model`): its batches and loss

    def optimizer(self, module: Any) -> Any:
        import torch

        return torch.optim.AdamW(
            [p for n, p in module.named_parameters() if self.in_group(clean_name(n))], lr=1e-2
        )


def subject(
    ctx: ProbeContext,
    parts: tuple[str, ...],
    build_model: Callable[[int], Any],
    intended: tuple[str, ...],
    frozen_parts: tuple[str, ...],
) -> Subject:
    """ds-doctor's four-part model (`build_model`, its `intended` and `frozen_parts` names) with `parts` as the
    group; or, with `--model`, the user's, by this rule: the input embedding frozen, the parameters of its norm
    layers (modules whose class name has "Norm"; with none, the last trainable parameter) requiring grad but left
    out of the group on purpose, every other trainable parameter in it."""
    if not ctx.has_user_model:
        return Subject(
            build_model,
            lambda n: n.split(".")[0] in parts,
            tuple(n for n in intended if n.split(".")[0] in parts),
            frozen_parts,
        )
    user = ctx.user_model(seed=0)  # read for its names; it also makes the batches and the loss
    user.freeze(None, required=False)
    probe = user.module
    trainable = [n for n, p in probe.named_parameters() if p.requires_grad]
    norms = {
        f"{owner}.{name}".lstrip(".")
        for owner, module in probe.named_modules()
        if "Norm" in type(module).__name__
        for name, _ in module.named_parameters(recurse=False)
    }
    left_out = {n for n in trainable if n in norms} or set(trainable[-1:])
    frozen = tuple(n for n, p in probe.named_parameters() if not p.requires_grad)
    ctx.note("group_rule", {"frozen": list(frozen), "left_out": sorted(left_out)})
    with_frozen = "c" in parts  # the frozen-in-group route: the frozen embedding goes into the group too
    return Subject(
        lambda seed: _user_module(ctx, seed),
        lambda n: n not in left_out and (with_frozen or n not in frozen),
        tuple(n for n in trainable if n not in left_out),
        frozen,
        user,
    )


def _user_module(ctx: ProbeContext, seed: int) -> Any:
    user = ctx.user_model(seed=seed)
    user.freeze(None, required=False)  # the input embedding, where the model has one
    return user.module


def user_ds_config(ctx: ProbeContext, user: UserConfig) -> dict[str, Any]:
    """The user's config for this route, which passes its own one-group optimizer (the group is what is checked):
    the config's optimizer and scheduler go (a warmup's first lr is 0: one step would show nothing), and ZeRO-Offload
    is told to accept that optimizer; each change is listed, as every other one made to run here."""
    filled = fill(user.config, ctx.world_size, ctx.device)
    config = filled.config
    for section in ("optimizer", "scheduler"):
        if config.pop(section, None) is not None:
            filled.changed[section] = (
                "dropped: this route passes its own one-group AdamW, the group is what is checked"
            )
    if (config.get("zero_optimization") or {}).get("offload_optimizer", {}).get("device") in ("cpu", "nvme"):
        config["zero_force_ds_cpu_optimizer"] = False
        filled.changed["zero_force_ds_cpu_optimizer"] = (
            "false: ZeRO-Offload refuses a client optimizer otherwise"
        )
    ctx.note(
        DeepSpeedConfigNote.NOTE,
        {"path": user.path, "sha256": user.sha256, "filled": filled.filled, "changed": filled.changed},
    )
    ctx.add_findings(change_findings(filled, ctx.rank))
    return {**config, "steps_per_print": 10**9, "wall_clock_breakdown": False}

"""Coverage invariants (S3): which parameters the optimizer tracks, by module name, before and after
a framework wraps the model and the optimizer, and which of them a step really changes.

Wrappers rename and re-create parameters: FSDP1 prefixes `_fsdp_wrapped_module.` and, without
`use_orig_params`, replaces each unit's parameters by one `FlatParameter` whose `_fqns` (and
per-rank `_shard_param_infos`) say which original parameters it holds; FSDP2 swaps in `DTensor`
parameters under the original names; DeepSpeed ZeRO keeps the module's own objects in its bit16 /
fp16 groups. `tracked_names` maps the tensors an optimizer holds back to original names through
identity with the wrapped model's live parameters (references held on both sides for the call,
never stored `id()`s), so a tensor that maps to nothing is an orphan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from doctor.invariants import ERROR, INFO, Finding

WRAPPER_PARTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
REMEDY_ORDER = ("Build the optimizer after wrapping, from the wrapped model's parameters (or let Accelerate's prepare "
                "remap it: FSDP1 needs use_orig_params=True for that).")


def clean_name(name: str) -> str:
    """An FSDP/compile-wrapped parameter name as the original module named it."""
    for part in WRAPPER_PARTS:
        name = name.replace(part, "")
    return name


def live_names(module: Any) -> list[tuple[Any, tuple[str, ...]]]:
    """(parameter, the original names it stands for on this rank) for each live parameter.

    A FlatParameter stands for the original parameters whose data lie in this rank's shard."""
    out = []
    for name, param in module.named_parameters():
        clean = clean_name(name)
        fqns = getattr(param, "_fqns", None)
        if fqns is None:
            out.append((param, (clean,)))
            continue
        prefix = clean.rsplit("_flat_param", 1)[0]
        infos = getattr(param, "_shard_param_infos", None)
        held = [fqn for i, fqn in enumerate(fqns) if infos is None or infos[i].in_shard]
        out.append((param, tuple(prefix + fqn for fqn in held)))
    return out


@dataclasses.dataclass
class Tracked:
    """What an optimizer tracks: original names with their group index, and tensors that map to no live parameter."""

    groups: dict[str, int]
    orphans: list[tuple[int, tuple[int, ...]]]  # (group index, shape)


def tracked_names(groups: Iterable[Iterable[Any]], module: Any) -> Tracked:
    """Map the tensors of each optimizer group to original parameter names of `module`'s live parameters."""
    live = live_names(module)
    by_id = {id(param): names for param, names in live}  # `live` keeps every parameter referenced
    result = Tracked({}, [])
    for index, group in enumerate(groups):
        for tensor in group:
            names = by_id.get(id(tensor))
            if names is None:
                result.orphans.append((index, tuple(int(s) for s in tensor.shape)))
                continue
            for name in names:
                result.groups[name] = index
    return result


def optimizer_groups(optimizer: Any) -> list[list[Any]]:
    """The tensors an optimizer holds per group: ZeRO's low-precision groups, else its param_groups."""
    for attr in ("bit16_groups", "fp16_groups", "bf16_groups"):  # ZeRO 1/2, ZeRO-3, BF16_Optimizer
        groups = getattr(optimizer, attr, None)
        if groups:
            return [list(group) for group in groups]
    return [list(group["params"]) for group in optimizer.param_groups]


def tracked_set(before: Mapping[str, int], after: Mapping[str, int], frozen: Iterable[str], *,
                stage: str = "after_wrap") -> list[Finding]:
    """The optimizer tracks the same parameter names, in the same groups, before and after wrapping.
    A frozen parameter the wrapper dropped on purpose (DeepSpeed ZeRO does) is only an info."""
    frozen = set(frozen)
    findings = []
    for name in sorted(set(before) - set(after)):
        if name in frozen:
            findings.append(Finding("tracked_set", INFO, f"{name} is frozen and no longer tracked after wrapping "
                                    "(dropped on purpose)", stage=stage))
        else:
            findings.append(Finding("tracked_set", ERROR, f"{name} was tracked before wrapping and is not after: "
                                    "it will not train", stage=stage, expected="the same names before and after",
                                    remedy=REMEDY_ORDER))
    for name in sorted(set(after) - set(before)):
        what = "frozen" if name in frozen else "left out of the optimizer on purpose"
        findings.append(Finding("tracked_set", ERROR, f"{name} ({what}) is tracked after wrapping: the wrapper added "
                                "it, and steps will update it", stage=stage, expected="the same names before and after",
                                remedy="Keep several param groups or set requires_grad=False on what must not "
                                "train; upgrade the wrapper that rebuilds a single group from model.parameters()."))
    for name in sorted(set(before) & set(after)):
        if before[name] != after[name]:
            findings.append(Finding("tracked_set", ERROR, f"{name} moved from param group {before[name]} to "
                                    f"{after[name]} when wrapped (its lr / weight decay change)", stage=stage))
    return findings


def tracked_live(tracked: Tracked, *, stage: str = "after_wrap") -> list[Finding]:
    """Every tensor the optimizer tracks is a live parameter of the wrapped model."""
    return [Finding("tracked_live", ERROR, f"param group {group} holds a {shape} tensor that is no parameter of the "
                    "wrapped model: its steps update an orphan", stage=stage,
                    expected="every tracked tensor is a live parameter", remedy=REMEDY_ORDER)
            for group, shape in tracked.orphans]


def step_changes(changed: Iterable[str], intended: Iterable[str], *, stage: str = "after_step") -> list[Finding]:
    """After one step exactly the intended parameters changed (values gathered across ranks)."""
    changed, intended = set(changed), set(intended)
    findings = [Finding("step_changes", ERROR, f"{name} should train but one step left it unchanged", stage=stage,
                        expected="exactly the optimizer's trainable parameters change", remedy=REMEDY_ORDER)
                for name in sorted(intended - changed)]
    findings += [Finding("step_changes", ERROR, f"{name} changed in a step although it is not meant to train",
                         stage=stage, expected="exactly the optimizer's trainable parameters change")
                 for name in sorted(changed - intended)]
    return findings

"""What an optimizer tracks, by original parameter name, through whatever wrapped the model (S3's collector).

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
from collections.abc import Iterable
from typing import Any

WRAPPER_PARTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def clean_name(name: str) -> str:
    """An FSDP/compile-wrapped parameter name as the original module named it."""
    for part in WRAPPER_PARTS:
        name = name.replace(part, "")
    return name


def live_names(module: Any) -> list[tuple[Any, tuple[str, ...]]]:
    """(parameter, the original names it stands for on this rank) for each live parameter.

    A FlatParameter stands for the original parameters whose data lie in this rank's shard."""
    out: list[tuple[Any, tuple[str, ...]]] = []
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

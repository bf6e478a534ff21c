"""Device maps: where every parameter, gradient, partition and optimizer-state tensor lives.

Collecting is metadata only: it reads `device`, `dtype` and `shape` and never copies, syncs or
gathers a tensor (ZeRO-3 partitions are read as partitions), so it is cheap at any model size
and safe to call inside a user's training job. torch is imported lazily by the collectors.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from reports.records import TensorRecord

#: Roles a record can have; invariants select records by role.
ROLES = (
    "param",  # a module parameter (for ZeRO-3: the placeholder the module holds); a tied one once, with aliases
    "buffer",  # a module buffer (rotary inv_freq, a causal mask, running statistics), owned by its module
    "param_partition",  # ZeRO-3 `param.ds_tensor`: this rank's shard of a parameter
    "grad",  # `param.grad`
    "bit16_partition",  # ZeRO's flat low-precision partition of a parameter group
    "fp32_partition",  # ZeRO's fp32 master partition of a parameter group
    "fp32_partition_grad",  # its gradient, what the optimizer steps with
    "grad_buffer",  # ZeRO's gradient accumulation / offload buffers
    "optim_state",  # optimizer.state[p][key]
    "optim_group_tensor",  # a tensor kept inside optimizer.param_groups[i]
    "clip_operand",  # an operand of ZeRO's unscale_and_clip_grads, as it was called
)


def dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


class Recorder:
    """Collects records for one rank and stage; collectors call `add`."""

    def __init__(self, rank: int, stage: str) -> None:
        self.rank = rank
        self.stage = stage
        self.records: list[TensorRecord] = []

    def add(self, value: Any, *, role: str, path: str, owner: str | None = None, aliases: tuple[str, ...] = ()) -> None:
        """Record a tensor's placement, or a Python number as device `python`; anything else is ignored."""
        import torch

        if isinstance(value, torch.Tensor):
            numel = int(value.numel())
            placement = (str(value.device), dtype_name(value.dtype), tuple(int(s) for s in value.shape), numel,
                         numel * value.element_size(), bool(value.requires_grad))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            placement = ("python", type(value).__name__, (), 1, 0, None)
        else:
            return
        device, dtype, shape, numel, nbytes, requires_grad = placement
        self.records.append(TensorRecord(rank=self.rank, stage=self.stage, role=role, path=path, owner=owner,
                                         device=device, dtype=dtype, shape=shape, numel=numel, nbytes=nbytes,
                                         requires_grad=requires_grad, aliases=aliases))


def iter_nested_tensors(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Yield (path, tensor) for every tensor nested in dicts, lists and tuples."""
    import torch

    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from iter_nested_tensors(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from iter_nested_tensors(item, f"{path}[{index}]")


def parameter_names(module: Any) -> dict[int, str]:
    """`id(param) -> name` for a live module; valid while the module holds its parameters."""
    return {id(p): name for name, p in module.named_parameters(remove_duplicate=False)}


def _by_tensor(named: Iterable[tuple[str, Any]]) -> list[tuple[str, Any, tuple[str, ...]]]:
    """(first name, tensor, other names) per distinct tensor, in module order."""
    names: dict[int, list[str]] = {}
    tensors: dict[int, Any] = {}
    for name, tensor in named:
        names.setdefault(id(tensor), []).append(name)
        tensors.setdefault(id(tensor), tensor)
    return [(found[0], tensors[key], tuple(found[1:])) for key, found in names.items()]


def collect_module(rec: Recorder, module: Any) -> None:
    """Parameters (a tied one once, with every name), their ZeRO-3 partitions (`ds_tensor`) and gradients, and
    the buffers of an `nn.Module`."""
    for name, param, aliases in _by_tensor(module.named_parameters(remove_duplicate=False)):
        rec.add(param, role="param", path=name, owner=name, aliases=aliases)
        partition = getattr(param, "ds_tensor", None)
        if partition is not None:
            rec.add(partition, role="param_partition", path=f"{name}.ds_tensor", owner=name)
        if param.grad is not None:
            rec.add(param.grad, role="grad", path=f"{name}.grad", owner=name)
    for name, buffer, aliases in _by_tensor(module.named_buffers(remove_duplicate=False)):
        rec.add(buffer, role="buffer", path=name, owner=name.rpartition(".")[0] or None, aliases=aliases)


def collect_optimizer(
    rec: Recorder, optimizer: Any, names: Mapping[int, str], prefix: str = "optimizer"
) -> None:
    """Every tensor an optimizer holds: per-parameter `state` and anything nested in `param_groups`.

    `names` maps `id(param)` to the name used as `owner`; tensors it does not know are named by
    their position. A group's own tensors (Prodigy's `running_d_denom`, say) are owned by the
    group's first parameter, whose device they must share.
    """
    seen: set[int] = set()
    for gi, group in enumerate(optimizer.param_groups):
        params = list(group.get("params", []))
        group_names = [names.get(id(p), f"{prefix}.param_groups[{gi}].params[{pi}]") for pi, p in enumerate(params)]
        for param, name in zip(params, group_names, strict=True):
            seen.add(id(param))
            _collect_state(rec, optimizer.state.get(param, {}), prefix, name)
        for key, value in group.items():
            if key == "params":
                continue
            for path, tensor in iter_nested_tensors(value, f"{prefix}.param_groups[{gi}].{key}"):
                rec.add(tensor, role="optim_group_tensor", path=path, owner=group_names[0] if group_names else None)
    for index, (param, state) in enumerate(optimizer.state.items()):
        if id(param) not in seen:  # state for a tensor no group holds any more
            _collect_state(rec, state, prefix, names.get(id(param), f"{prefix}.state<untracked {index}>"))


def _collect_state(rec: Recorder, state: Mapping[str, Any], prefix: str, name: str) -> None:
    for key, value in state.items():
        for path, tensor in iter_nested_tensors(value, f"{prefix}.state[{name}].{key}"):
            rec.add(tensor, role="optim_state", path=path, owner=name)


def is_zero3_optimizer(optimizer: Any) -> bool:
    return hasattr(optimizer, "fp32_partitioned_groups_flat")


def is_zero12_optimizer(optimizer: Any) -> bool:
    return hasattr(optimizer, "single_partition_of_fp32_groups")


def fp32_partitions(optimizer: Any) -> list[tuple[str, Any]]:
    """(path, tensor) of a ZeRO optimizer's fp32 master partitions; empty for other optimizers."""
    if is_zero3_optimizer(optimizer):
        attr = "fp32_partitioned_groups_flat"
    elif is_zero12_optimizer(optimizer):
        attr = "single_partition_of_fp32_groups"
    else:
        return []
    return [(f"optimizer.{attr}[{i}]", t) for i, t in enumerate(getattr(optimizer, attr))]


def collect_zero_optimizer(rec: Recorder, optimizer: Any, module_names: Mapping[int, str]) -> None:
    """A DeepSpeed ZeRO 1/2/3 optimizer: fp32 partitions, their grads, buffers, inner optimizer state."""
    partition_names: dict[int, str] = {}
    for path, tensor in fp32_partitions(optimizer):
        partition_names[id(tensor)] = path
        rec.add(tensor, role="fp32_partition", path=path)
        if tensor.grad is not None:
            rec.add(tensor.grad, role="fp32_partition_grad", path=f"{path}.grad", owner=path)
    if is_zero3_optimizer(optimizer):
        _collect_zero3_buffers(rec, optimizer, module_names)
    else:
        _collect_zero12_buffers(rec, optimizer, module_names)
    inner = getattr(optimizer, "optimizer", None)
    if inner is not None and hasattr(inner, "param_groups"):
        collect_optimizer(rec, inner, partition_names, prefix="optimizer.optimizer")


def _collect_zero3_buffers(rec: Recorder, optimizer: Any, module_names: Mapping[int, str]) -> None:
    for i, tensor in enumerate(optimizer.fp16_partitioned_groups_flat):
        if tensor is not None:  # None when swapped to NVMe
            rec.add(tensor, role="bit16_partition", path=f"optimizer.fp16_partitioned_groups_flat[{i}]")
    flat = getattr(optimizer, "grad_partitions_flat_buffer", None)
    if flat is not None:
        rec.add(flat, role="grad_buffer", path="optimizer.grad_partitions_flat_buffer")
    by_ds_id = {p.ds_id: p for group in optimizer.fp16_groups for p in group}
    grad_partitions = getattr(optimizer, "_DeepSpeedZeroOptimizer_Stage3__param_id_to_grad_partition", {})
    for ds_id, tensor in grad_partitions.items():
        name = module_names.get(id(by_ds_id.get(ds_id)), f"ds_id={ds_id}")
        rec.add(tensor, role="grad_buffer", path=f"optimizer.grad_partition[{name}]", owner=name)


def _collect_zero12_buffers(rec: Recorder, optimizer: Any, module_names: Mapping[int, str]) -> None:
    for i, tensor in enumerate(getattr(optimizer, "bit16_groups_flat", [])):
        rec.add(tensor, role="bit16_partition", path=f"optimizer.bit16_groups_flat[{i}]")
    param_dict = getattr(optimizer, "param_dict", {})
    for param_id, tensor in getattr(optimizer, "accumulated_grads_in_cpu", {}).items():
        name = module_names.get(id(param_dict.get(param_id)), f"param_id={param_id}")
        rec.add(tensor, role="grad_buffer", path=f"optimizer.accumulated_grads_in_cpu[{name}]", owner=name)
    averaged = getattr(optimizer, "averaged_gradients", {})
    for gi, grads in (averaged.items() if isinstance(averaged, Mapping) else enumerate(averaged)):
        for path, tensor in iter_nested_tensors(grads, f"optimizer.averaged_gradients[{gi}]"):
            rec.add(tensor, role="grad_buffer", path=path)


def collect(
    rec: Recorder, *, module: Any = None, optimizer: Any = None, engine: Any = None
) -> list[TensorRecord]:
    """Collect whatever is given; an engine contributes its module and optimizer."""
    if engine is not None:
        module = module if module is not None else getattr(engine, "module", None)
        optimizer = optimizer if optimizer is not None else getattr(engine, "optimizer", None)
    names = parameter_names(module) if module is not None else {}
    if module is not None:
        collect_module(rec, module)
    if optimizer is not None:
        optimizer = unwrap_optimizer(optimizer)
        if is_zero3_optimizer(optimizer) or is_zero12_optimizer(optimizer):
            collect_zero_optimizer(rec, optimizer, names)
        else:
            collect_optimizer(rec, optimizer, names)
    return rec.records


def unwrap_optimizer(optimizer: Any) -> Any:
    """Peel wrappers (Accelerate's `AcceleratedOptimizer`, ...) that keep the real one in `.optimizer`.

    Stops at a ZeRO optimizer, whose own `.optimizer` is the inner per-partition optimizer.
    """
    while not (is_zero3_optimizer(optimizer) or is_zero12_optimizer(optimizer)):
        inner = getattr(optimizer, "optimizer", None)
        if inner is None or inner is optimizer or not hasattr(inner, "param_groups"):
            break
        optimizer = inner
    return optimizer


def select(records: Iterable[TensorRecord], **criteria: Any) -> list[TensorRecord]:
    """Records whose fields equal the given values (a tuple/set value means any of)."""
    def matches(record: TensorRecord) -> bool:
        for key, wanted in criteria.items():
            value = getattr(record, key)
            if isinstance(wanted, (tuple, set, frozenset)):
                if value not in wanted:
                    return False
            elif value != wanted:
                return False
        return True

    return [r for r in records if matches(r)]

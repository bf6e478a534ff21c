"""Device maps: where every parameter, gradient, partition and optimizer-state tensor lives.

Collecting is metadata only: it reads `device`, `dtype` and `shape` and never copies, syncs or
gathers a tensor (ZeRO-3 partitions are read as partitions), so it is cheap at any model size
and safe to call inside a user's training job. torch is imported lazily by the collectors.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ds_doctor.reports.model import TensorRecord

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


_TENSOR: Any = None  # torch.Tensor, imported on first use
_DEVICE_NAMES: dict[Any, str] = {}  # torch.device -> "cuda:0": str() of a device costs more than the lookup
_DTYPE_NAMES: dict[Any, str] = {}


def _tensor_type() -> Any:
    global _TENSOR
    if _TENSOR is None:
        import torch

        _TENSOR = torch.Tensor
    return _TENSOR


def dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def _device_text(device: Any) -> str:
    """A device's text, remembered (collectors look it up first:
    `_DEVICE_NAMES.get(device) or _device_text(device)`)."""
    name = _DEVICE_NAMES[device] = str(device)
    return name


def device_name(value: Any) -> str | None:
    """A tensor's device as text, `python` for a Python number, None for anything else (not recorded)."""
    if isinstance(value, _TENSOR or _tensor_type()):
        device = value.device
        return _DEVICE_NAMES.get(device) or _device_text(device)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "python"
    return None


#: A row before it becomes a record: (value, role, path, owner, aliases, device). `path` is text, or a tuple of
#: parts joined only when the row becomes a record (most rows of a big model never do inside a job).
Row = tuple[Any, str, Any, "str | None", tuple[str, ...], str]


class Recorder:
    """Collects one rank's rows at one stage; collectors call `add`.

    A row keeps the tensor and its device; dtype, shape and sizes are read when the row becomes a
    `TensorRecord` (`records`, `materialize`). A watch checks devices on rows and makes records of the
    offenders only, which is what keeps a check inside a job at millions of tensors a second. Read
    `records` (or materialize) at the same moment as the collection, before the job moves a tensor.
    """

    __slots__ = ("_records", "rank", "rows", "stage")

    def __init__(self, rank: int, stage: str) -> None:
        self.rank = rank
        self.stage = stage
        self.rows: list[Row] = []
        self._records: list[TensorRecord] | None = None

    def add(
        self, value: Any, *, role: str, path: Any, owner: str | None = None, aliases: tuple[str, ...] = ()
    ) -> None:
        """Record a tensor's placement, or a Python number as device `python`; anything else is ignored."""
        device = device_name(value)
        if device is not None:
            self.rows.append((value, role, path, owner, aliases, device))
            self._records = None

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def records(self) -> list[TensorRecord]:
        if self._records is None or len(self._records) != len(self.rows):
            self._records = self.materialize(self.rows)
        return self._records

    def materialize(self, rows: Iterable[Row]) -> list[TensorRecord]:
        return [self.record(row) for row in rows]

    def record(self, row: Row) -> TensorRecord:
        value, role, path, owner, aliases, device = row
        if device == "python":
            dtype, shape, numel, nbytes, requires_grad = type(value).__name__, (), 1, 0, None
        else:
            numel = int(value.numel())
            dtype, shape, nbytes = dtype_name(value.dtype), tuple(value.shape), numel * value.element_size()
            requires_grad = bool(value.requires_grad)
        return tensor_record(
            (self.rank, self.stage),
            (role, path, owner, aliases, device),
            dtype,
            shape,
            (numel, nbytes),
            requires_grad,
        )


def tensor_record(
    where: tuple[int, str],
    placed: tuple[str, Any, str | None, tuple[str, ...], str],
    dtype: str,
    shape: tuple[int, ...],
    size: tuple[int, int],
    requires_grad: bool | None,
) -> TensorRecord:
    """A row's record: `where` (rank, stage), `placed` the row's (role, path, owner, aliases, device), `size` its
    (numel, nbytes); a path kept as parts (a ZeRO-3 partition's) is joined here. `ds_doctor.api` makes the same
    record from metadata it read earlier."""
    rank, stage = where
    role, path, owner, aliases, device = placed
    numel, nbytes = size
    return TensorRecord(
        rank=rank,
        stage=stage,
        role=role,
        path=path if isinstance(path, str) else "".join(map(str, path)),
        owner=owner,
        device=device,
        dtype=dtype,
        shape=shape,
        numel=numel,
        nbytes=nbytes,
        requires_grad=requires_grad,
        aliases=aliases,
    )


def iter_nested_tensors(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Yield (path, tensor) for every tensor nested in dicts, lists and tuples."""
    if isinstance(value, _TENSOR or _tensor_type()):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from iter_nested_tensors(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from iter_nested_tensors(item, f"{path}[{index}]")


def parameter_names(module: Any) -> dict[int, str]:
    """`id(param) -> name` for a live module; valid while the module holds its parameters."""
    return {id(p): name for name, p in named_tensors(module)[0]}


def _plain_tree(module: Any) -> bool:
    """The root's naming is nn.Module's own (FSDP1's root renames its parameters: it goes through its methods)."""
    from torch import nn

    kind = type(module)
    return (
        kind.named_parameters is nn.Module.named_parameters
        and kind.named_buffers is nn.Module.named_buffers
        and kind.named_modules is nn.Module.named_modules
    )


def named_tensors(module: Any) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(named parameters, named buffers) as `named_parameters(remove_duplicate=False)` and `named_buffers(...)`
    list them, in one walk of the module tree (three of torch's walks cost more than the rest of a collection)."""
    if not _plain_tree(module):
        return (
            list(module.named_parameters(remove_duplicate=False)),
            list(module.named_buffers(remove_duplicate=False)),
        )
    params: list[tuple[str, Any]] = []
    buffers: list[tuple[str, Any]] = []
    stack = [("", module)]
    pop, push = stack.pop, stack.append
    while stack:
        prefix, current = pop()
        own = current.__dict__  # nn.Module's attribute lookup costs more than this dict's
        _held(params, prefix, own.get("_parameters"))
        _held(buffers, prefix, own.get("_buffers"))
        held = own.get("_modules")
        if held:
            for key, child in reversed(held.items()):
                if child is not None:
                    push((prefix + key + ".", child))
    return params, buffers


def _held(out: list[tuple[str, Any]], prefix: str, held: Mapping[str, Any] | None) -> None:
    """A module's own parameters or buffers (a registered None is no tensor), named under `prefix`."""
    if held:
        for key, value in held.items():
            if value is not None:
                out.append((prefix + key, value))


def by_tensor(named: Iterable[tuple[str, Any]]) -> list[tuple[str, Any, tuple[str, ...]]]:
    """(first name, tensor, other names) per distinct tensor, in module order."""
    first: dict[int, tuple[str, Any, list[str]]] = {}
    for name, tensor in named:
        seen = first.get(id(tensor))
        if seen is None:
            first[id(tensor)] = (name, tensor, [])
        else:
            seen[2].append(name)
    return [(name, tensor, tuple(others)) for name, tensor, others in first.values()]


def collect_module(rec: Recorder, module: Any) -> dict[int, str]:
    """Parameters (a tied one once, with every name), their ZeRO-3 partitions (`ds_tensor`) and gradients, and
    the buffers of an `nn.Module`. Returns `id(param) -> name` (the first name of a tied one).

    The loop is written for speed (local names, rows appended directly): inside a job it runs over every
    parameter of the model at each watched moment.
    """
    params, buffers = named_tensors(module)
    names: dict[int, str] = {}
    rows = rec.rows
    append = rows.append
    known = _DEVICE_NAMES.get
    tied: set[int] = set()  # ids of parameters met under a second name
    for name, param in params:
        key = id(param)
        if key in names:
            tied.add(key)
            continue
        names[key] = name
        device = param.device
        append((param, "param", name, name, (), known(device) or _device_text(device)))
        partition = param.__dict__.get("ds_tensor")
        if partition is not None:
            rec.add(partition, role="param_partition", path=(name, ".ds_tensor"), owner=name)
        grad = param.grad
        if grad is not None:
            device = grad.device
            append((grad, "grad", (name, ".grad"), name, (), known(device) or _device_text(device)))
    if tied:
        _add_aliases(rows, params, names, tied)
    for name, buffer, aliases in by_tensor(buffers):
        rec.add(buffer, role="buffer", path=name, owner=name.rpartition(".")[0] or None, aliases=aliases)
    rec._records = None
    return names


def _add_aliases(
    rows: list[Row], params: list[tuple[str, Any]], names: Mapping[int, str], tied: set[int]
) -> None:
    """Give each tied parameter's row (its first name) the other names it goes by."""
    others: dict[int, list[str]] = {}
    for name, param in params:
        if id(param) in tied and names[id(param)] != name:
            others.setdefault(id(param), []).append(name)
    for index, row in enumerate(rows):
        if row[1] == "param" and id(row[0]) in others:
            rows[index] = (*row[:4], tuple(others[id(row[0])]), row[5])


def collect_optimizer(
    rec: Recorder, optimizer: Any, names: Mapping[int, str], prefix: str = "optimizer"
) -> None:
    """Every tensor an optimizer holds: per-parameter `state` and anything nested in `param_groups`.

    `names` maps `id(param)` to the name used as `owner`; tensors it does not know are named by
    their position. A group's own tensors (Prodigy's `running_d_denom`, say) are owned by the
    group's first parameter, whose device they must share.
    """
    for gi, group in enumerate(optimizer.param_groups):
        _group_tensors(rec, gi, group, names, prefix)
    # state.items() rather than state.get(param): a tensor key hashes through Python (Tensor.__hash__)
    tensor_type, append, known = _TENSOR or _tensor_type(), rec.rows.append, _DEVICE_NAMES.get
    positions: dict[int, str] | None = None
    for index, (param, held) in enumerate(optimizer.state.items()):
        if not held:
            continue
        name = names.get(id(param))
        if name is None:  # a tensor with no module name: named by its place in the groups, or as untracked
            positions = positions if positions is not None else _positions(optimizer, prefix)
            name = positions.get(id(param)) or f"{prefix}.state<untracked {index}>"
        head = (prefix, ".state[", name, "].")
        for key, value in held.items():
            if isinstance(value, tensor_type):
                device = value.device
                append((value, "optim_state", (*head, key), name, (), known(device) or _device_text(device)))
            else:
                for path, nested in iter_nested_tensors(value, "".join(head) + str(key)):
                    rec.add(nested, role="optim_state", path=path, owner=name)
    rec._records = None


def _group_tensors(
    rec: Recorder, gi: int, group: Mapping[str, Any], names: Mapping[int, str], prefix: str
) -> None:
    """The tensors a param group holds besides its params, owned by the group's first parameter."""
    params = group.get("params", [])
    first = (names.get(id(params[0])) or f"{prefix}.param_groups[{gi}].params[0]") if params else None
    for key, value in group.items():
        if key == "params" or isinstance(value, (str, bool, int, float, type(None))):
            continue
        for path, tensor in iter_nested_tensors(value, f"{prefix}.param_groups[{gi}].{key}"):
            rec.add(tensor, role="optim_group_tensor", path=path, owner=first)


def _positions(optimizer: Any, prefix: str) -> dict[int, str]:
    return {
        id(param): f"{prefix}.param_groups[{gi}].params[{pi}]"
        for gi, group in enumerate(optimizer.param_groups)
        for pi, param in enumerate(group.get("params", []))
    }


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
    for gi, grads in averaged.items() if isinstance(averaged, Mapping) else enumerate(averaged):
        for path, tensor in iter_nested_tensors(grads, f"optimizer.averaged_gradients[{gi}]"):
            rec.add(tensor, role="grad_buffer", path=path)


def collect(
    rec: Recorder, *, module: Any = None, optimizer: Any = None, engine: Any = None
) -> list[TensorRecord]:
    """Collect whatever is given, as records; an engine contributes its module and optimizer."""
    collect_rows(rec, module=module, optimizer=optimizer, engine=engine)
    return rec.records


def collect_rows(rec: Recorder, *, module: Any = None, optimizer: Any = None, engine: Any = None) -> Recorder:
    """As `collect`, leaving rows unmade into records (a watch makes records of offenders only)."""
    if engine is not None:
        module = module if module is not None else getattr(engine, "module", None)
        optimizer = optimizer if optimizer is not None else getattr(engine, "optimizer", None)
    names = collect_module(rec, module) if module is not None else {}
    if optimizer is not None:
        optimizer = unwrap_optimizer(optimizer)
        if is_zero3_optimizer(optimizer) or is_zero12_optimizer(optimizer):
            collect_zero_optimizer(rec, optimizer, names)
        else:
            collect_optimizer(rec, optimizer, names)
    return rec


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

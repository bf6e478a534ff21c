"""A thin record of the collectives this process enters, for a torch with no Flight Recorder to dump.

It wraps `torch.distributed`'s collective functions (in `torch.distributed` and in `distributed_c10d`, so the
calls torch makes internally are seen too) and keeps, per call, what the recorder would: group, sequence id per
group, op, input/output sizes and dtypes, whether it returned, and the calling frames. It writes the recorder's
dump format, so torch's analyzer reads it unchanged (`ds_doctor.forensics.flight`). Only ds-doctor's own workers
install it (never a user's job), and only where the recorder is missing or `DS_DOCTOR_COLLECTIVE_RECORD=thin`.
"""

from __future__ import annotations

import functools
import inspect
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from ds_doctor.forensics.flight import BUFFER_ENTRIES, FORMAT_VERSION, group_config

OPS = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "broadcast",
    "reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "gather",
    "scatter",
)
_OUTPUTS = (
    "output",
    "output_tensor",
    "output_tensor_list",
    "tensor_list",
    "gather_list",
    "output_split_sizes",
)


#: torch dtype -> c10's ScalarType name, as the recorder writes it
_SCALAR = {
    "float32": "Float",
    "float64": "Double",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "int64": "Long",
    "int32": "Int",
    "int16": "Short",
    "int8": "Char",
    "uint8": "Byte",
    "bool": "Bool",
}


def _dtype(tensor: Any) -> str:
    name = str(tensor.dtype).removeprefix("torch.")
    return _SCALAR.get(name, name)


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


class ThinRecord:
    def __init__(self, size: int = BUFFER_ENTRIES) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=size)
        self.sequence: dict[str, int] = {}
        self.lock = threading.Lock()
        self.record_id = 0

    def _entry(self, op: str, bound: inspect.BoundArguments) -> dict[str, Any]:
        from torch.distributed import distributed_c10d as c10d

        group = bound.arguments.get("group") or c10d._get_default_group()
        name = c10d._world.pg_names.get(group, "?")
        # the analyzer wants "<backend>:<op>", as the recorder names them
        backend = str(c10d.get_backend(group))
        inputs = [t for k, v in bound.arguments.items() if k not in _OUTPUTS for t in _tensors(v)]
        outputs = [t for k, v in bound.arguments.items() if k in _OUTPUTS for t in _tensors(v)] or inputs
        with self.lock:
            self.sequence[name] = seq = self.sequence.get(name, 0) + 1
            self.record_id += 1
            entry = {
                "record_id": self.record_id - 1,
                "pg_id": 0,
                "process_group": [name, getattr(group, "group_desc", "")],
                "collective_seq_id": seq,
                "p2p_seq_id": 0,
                "op_id": seq,
                "profiling_name": f"{backend}:{op}",
                "time_created_ns": time.time_ns(),
                "input_sizes": [list(t.shape) for t in inputs],
                "input_dtypes": [_dtype(t) for t in inputs],
                "output_sizes": [list(t.shape) for t in outputs],
                "output_dtypes": [_dtype(t) for t in outputs],
                "state": "scheduled",
                "retired": False,
                "is_p2p": False,
                "timeout_ms": 0,
                "thread_name": threading.current_thread().name,
                "frames": [
                    {"name": f.name, "filename": f.filename, "line": f.lineno}
                    for f in reversed(traceback.extract_stack(limit=18)[:-2])
                ],
            }
            self.entries.append(entry)
        return entry

    def wrap(self, op: str, function: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            try:
                entry = self._entry(op, signature.bind(*args, **kwargs))
            except Exception:
                return function(*args, **kwargs)
            result = function(*args, **kwargs)
            entry.update(state="completed", retired=True)  # an async op counts as completed once issued
            return result

        return recorded

    def install(self) -> ThinRecord:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        for op in OPS:
            original = getattr(c10d, op, None)
            if original is None:
                continue
            wrapped = self.wrap(op, original)
            for module in (dist, c10d):
                if getattr(module, op, None) is original:
                    setattr(module, op, wrapped)  # for the life of the worker: nothing restores them
        return self

    def dump(self) -> dict[str, Any]:
        with self.lock:
            entries = [dict(e) for e in self.entries]
        return {
            "version": FORMAT_VERSION,
            "pg_config": group_config(),
            "pg_status": {},
            "comm_lib_version": "",
            "entries": entries,
            "source": "ds-doctor thin record",
        }

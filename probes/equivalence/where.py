"""Where a divergence starts, not only when: at the first diverging step, the first module whose forward output
leaves the tolerance.

Every route computes its micro-batches through `Session.micro`; for micro-batch 0 of each step it records each
module's forward output on this rank (forward hooks on the wrapped model; tiny models, a few KB a step). Only when
the steps diverge is the reference asked (in its own process, ds_doctor.probes.equivalence.reference) for the same
micro-batch's outputs at that step, replaying the steps before it: a healthy run pays for the recording alone.
Names are compared with the wrappers' parts taken out (`module.` of DDP and DeepSpeed, FSDP1's
`_fsdp_wrapped_module.`). The answer is a note on the case: the first module over the bound, in the order the
forward ran them, or that every module's output is within it (then the difference comes after the forward: the
loss, the gradients' reduction, clipping or the optimizer step).

Per module, the output's relative error (2-norms) is held to the bound of the quantity at that step: the route's
tolerance there, at least 1e-6 (the weights going into that step already differ by rounding on every route that is
not bit for bit the reference).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

#: what wrappers put into a module's name
_WRAPPER_PARTS = re.compile(
    r"(^|\.)(module|_fsdp_wrapped_module|_checkpoint_wrapped_module|_orig_mod)(?=\.|$)"
)
FLOOR = 1e-6


def plain_name(name: str) -> str:
    return _WRAPPER_PARTS.sub("", name).lstrip(".")


@contextlib.contextmanager
def recording(model: Any) -> Iterator[dict[str, Any]]:
    """Each module's forward output (the first tensor of it), detached, fp32, on the CPU, in the order they ran,
    under its name with the wrappers' parts taken out."""
    import torch

    outputs: dict[str, Any] = {}
    handles = []

    def hook_for(name: str) -> Any:
        def hook(_module: Any, _inputs: Any, output: Any) -> None:
            tensor = (
                output
                if isinstance(output, torch.Tensor)
                else next(
                    (
                        o
                        for o in (output if isinstance(output, (tuple, list)) else ())
                        if isinstance(o, torch.Tensor)
                    ),
                    None,
                )
            )
            if tensor is not None and tensor.is_floating_point() and name not in outputs:
                outputs[name] = tensor.detach().to("cpu", torch.float32, copy=True)

        return hook

    for name, module in model.named_modules():
        plain = plain_name(name)
        if plain:  # the whole model's output is the loss the steps already compare
            handles.append(module.register_forward_hook(hook_for(plain)))
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


def first_module_over(
    route: dict[str, Any], reference: dict[str, Any], bound: float
) -> tuple[str, float] | None:
    """The first module (in the route's forward order) whose output is over `bound` relative to the reference's,
    with its relative error; None where every module the two share is within it."""
    import torch

    for name, value in route.items():
        expected = reference.get(name)
        if expected is None or expected.shape != value.shape:
            continue
        scale = float(torch.linalg.vector_norm(expected)) or 1.0
        relative = float(torch.linalg.vector_norm(value - expected)) / scale
        if relative > bound:
            return name, relative
    return None


def describe(step: int, found: tuple[str, float] | None, compared: int, bound: float) -> str:
    if compared == 0:
        return f"step {step}: no module output could be matched with the reference's"
    if found is None:
        return (
            f"step {step}: every submodule's forward output ({compared} compared, rank 0's micro-batch 0) is within "
            f"{bound:.3g} of the reference's: the difference starts at the loss made from them or after it (the "
            "gradients' reduction, clipping or the optimizer step)"
        )
    name, relative = found
    return (
        f"step {step}: the first module whose forward output leaves the reference's is {name} "
        f"({relative:.3g} relative, bound {bound:.3g}; rank 0's micro-batch 0)"
    )

"""Where a divergence starts, not only when: at the first diverging step, the first module whose forward output
leaves the tolerance, and where every output is within it, the first module (from the loss backwards) whose output's
gradient leaves it.

Every route computes its micro-batches through `Session.micro`; for micro-batch 0 of each step it records each
module's forward output on this rank (forward hooks on the wrapped model; tiny models, a few KB a step). Only when
the steps diverge is the reference asked (in its own process, ds_doctor.probes.equivalence.reference) for the same
micro-batch's outputs at that step, replaying the steps before it: a healthy run pays for the recording alone.
Names are compared with the wrappers' parts taken out (`module.` of DDP and DeepSpeed, FSDP1's
`_fsdp_wrapped_module.`). The answer is a note on the case: the first module over the bound, in the order the
forward ran them; where every module's output is within it, the gradient of each module's output (recorded by a
hook on the output tensor, as the route's own backward of micro-batch 0 computed it, before any reduction across
ranks) against the reference's (micro-batch 0's loss over the accumulation steps, backward), in the order the
backward reached them: the first one over names where the backward parts (a loss scaled wrong shows at the module
next to the loss); where every gradient is within too, the difference comes after the backward (the gradients'
reduction, clipping or the optimizer step).

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


def first_tensor(output: Any) -> Any:
    """A module's output tensor: the output itself, or the first tensor of a tuple or list; None where there is none."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    items = output if isinstance(output, (tuple, list)) else ()
    return next((o for o in items if isinstance(o, torch.Tensor)), None)


def _keeper(grads: dict[str, Any], name: str) -> Any:
    """A tensor hook that keeps the first gradient the backward brings to `name`'s output."""
    import torch

    def hook(grad: Any) -> None:
        if name not in grads:
            grads[name] = grad.detach().to("cpu", torch.float32, copy=True)

    return hook


@contextlib.contextmanager
def recording(model: Any, grads: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """Each module's forward output (the first tensor of it), detached, fp32, on the CPU, in the order they ran,
    under its name with the wrappers' parts taken out; with `grads`, each output's gradient goes into it when the
    backward reaches it (later, outside this block), in that order."""
    import torch

    outputs: dict[str, Any] = {}
    handles = []

    def hook_for(name: str) -> Any:
        def hook(_module: Any, _inputs: Any, output: Any) -> None:
            tensor = first_tensor(output)
            if tensor is not None and tensor.is_floating_point() and name not in outputs:
                outputs[name] = tensor.detach().to("cpu", torch.float32, copy=True)
                if grads is not None and tensor.requires_grad:
                    tensor.register_hook(_keeper(grads, name))

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


AFTER = "the difference starts after the backward (the gradients' reduction across ranks, clipping or the optimizer)"
#: where the difference starts after the backward, by the first quantity that left its tolerance
AFTER_BACKWARD = {
    "grad_norm": (
        "the difference starts after the backward, in the parameters' gradients (their reduction across ranks or "
        "their accumulation over the window), before the optimizer step: the global gradient norm is off first"
    ),
    "update": (
        "the difference starts at the optimizer step: the loss and the gradient norm agree and the update does not "
        "(its learning rate, weight decay, parameter groups, clipping or the optimizer's state)"
    ),
}


def describe(
    step: int,
    found: tuple[str, float] | None,
    compared: int,
    bound: float,
    backward: tuple[tuple[str, float] | None, int, str | None] | None = None,
    stage: str = "",
    first: str | None = None,
) -> str:
    """The note: the first module whose output leaves the reference's; where none does, the first whose output's
    gradient does (`backward`: what `first_module_over` found on the gradients, how many were compared, and the
    module the backward reached first: the one next to the loss). `first`: the module the forward ran first; where
    it is the one that leaves, its parameters agreed at the step's start (the steps before were within tolerance),
    so what differs is most likely its input: another batch."""
    if compared == 0:
        return f"step {step}: no module output could be matched with the reference's"
    if found is not None:
        name, relative = found
        said = (
            f"step {step}: the first module whose forward output leaves the reference's is {name} "
            f"({relative:.3g} relative, bound {bound:.3g}; rank 0's micro-batch 0)"
        )
        if name == first:
            said += (
                ": it is the first module the forward runs, and the parameters agreed at the step's start, so "
                "most likely its input differs (another batch: the data order, or the samples a rank was dealt)"
            )
        return said
    within = (
        f"step {step}: every submodule's forward output ({compared} compared, rank 0's micro-batch 0) is within "
        f"{bound:.3g} of the reference's"
    )
    gradient, counted, nearest = backward if backward is not None else (None, 0, None)
    if counted == 0:
        return (
            f"{within}: the difference starts at the loss made from them or after it (the gradients' reduction, "
            "clipping or the optimizer step)"
        )
    if gradient is None:
        return f"{within}, and so is the gradient of each ({counted} compared): {AFTER_BACKWARD.get(stage, AFTER)}"
    name, relative = gradient
    where = (
        "it is the module next to the loss, so the gradient that reaches the model is already off: the loss's own "
        "scale or what the loss is made of"
        if name == nearest
        else "the gradients agree up to the module after it, so the backward of that module changes them"
    )
    return (
        f"{within}; the first whose output's gradient leaves it, from the loss backwards, is {name} "
        f"({relative:.3g} relative): {where}"
    )

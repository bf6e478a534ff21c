"""Muon as its authors define it (Keller Jordan's reference, which DeepSpeed's `MuonWithAuxAdam` adopts), for the
knob matrix's `optimizer = muon` (issue 50): the reference's own optimizer, never DeepSpeed's.

A matrix parameter (two or more dimensions, no "embed" or "lm_head" in its name: the rule `deepspeed.initialize`
tags `use_muon` by) steps on its Nesterov momentum orthogonalised by five quintic Newton-Schulz iterations, scaled by
sqrt(max(1, rows / cols)), with decoupled weight decay; every other parameter steps with AdamW (bias-corrected, eps
outside the root). Momentum 0.95 (`MuonWithAuxAdam`'s default): the config names lr, betas, eps and weight_decay,
shared by both halves. The iteration runs in the parameter's own dtype: float64 in the reference's exact run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

#: the momentum both halves' Muon uses where the config names none (`MuonWithAuxAdam`)
MUON_MOMENTUM = 0.95
#: the quintic Newton-Schulz iteration's coefficients and steps (Jordan's; DeepSpeed's `zeropower_via_newtonschulz5`)
NS_COEFFICIENTS, NS_STEPS = (3.4445, -4.7750, 2.0315), 5


def uses_muon(name: str, param: Any) -> bool:
    """Whether `deepspeed.initialize` puts `name` in the Muon half: a matrix, not an embedding or the head."""
    return param.ndim >= 2 and not any(word in name.lower() for word in ("embed", "lm_head"))


def orthogonalised(update: Any) -> Any:
    """The quintic Newton-Schulz iteration on a matrix (transposed first where it is tall), normalised by its
    Frobenius norm plus 1e-7: close to the orthogonal factor of `update`, not exactly it (singular values 0.7-1.2)."""
    a, b, c = NS_COEFFICIENTS
    x = update
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(NS_STEPS):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def optimizer(
    named_groups: Iterable[dict[str, Any]], lr: float, betas: tuple[float, float], eps: float
) -> Any:
    """Muon over each group's matrices, AdamW over the rest: each group (its "named" (name, parameter) pairs, its
    lr and weight_decay) split in two halves, as DeepSpeed 0.19.7 and later build them."""
    import torch

    class Muon(torch.optim.Optimizer):
        def step(self, closure: Any = None) -> Any:
            with torch.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            (_muon if group["use_muon"] else _adamw)(self.state[p], p, group)

    groups = []
    for group in named_groups:
        settings = {k: v for k, v in group.items() if k != "named"}
        for flag in (True, False):
            params = [p for n, p in group["named"] if uses_muon(n, p) is flag]
            if params:
                groups.append({"params": params, "use_muon": flag, **settings})
    return Muon(
        groups, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": 0.0, "momentum": MUON_MOMENTUM}
    )


def _muon(state: dict[str, Any], p: Any, group: dict[str, Any]) -> None:
    import torch

    beta = group["momentum"]
    buffer = state.setdefault("momentum_buffer", torch.zeros_like(p))
    buffer.mul_(beta).add_(p.grad, alpha=1 - beta)
    nesterov = p.grad.lerp(buffer, beta)
    rows, cols = p.shape[0], p[0].numel()
    update = orthogonalised(nesterov.reshape(rows, cols)) * max(1.0, rows / cols) ** 0.5
    p.mul_(1 - group["lr"] * group["weight_decay"])
    p.add_(update.reshape(p.shape), alpha=-group["lr"])


def _adamw(state: dict[str, Any], p: Any, group: dict[str, Any]) -> None:
    import torch

    b1, b2 = group["betas"]
    step = state["step"] = state.get("step", 0) + 1
    m = state.setdefault("exp_avg", torch.zeros_like(p))
    v = state.setdefault("exp_avg_sq", torch.zeros_like(p))
    m.mul_(b1).add_(p.grad, alpha=1 - b1)
    v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
    update = (m / (1 - b1**step)) / ((v / (1 - b2**step)).sqrt() + group["eps"])
    p.mul_(1 - group["lr"] * group["weight_decay"])
    p.add_(update, alpha=-group["lr"])

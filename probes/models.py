"""Tiny real models the probes train: a few KB of parameters, real autograd, real optimizers."""

from __future__ import annotations

from typing import Any

IN_FEATURES = 16
HIDDEN = 32
OUT_FEATURES = 4


def build_mlp(seed: int = 0) -> Any:
    """A two-layer MLP; the same seed gives the same weights on every rank."""
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(IN_FEATURES, HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, OUT_FEATURES),
    )


def batch(size: int, *, dtype: Any, device: Any, seed: int) -> tuple[Any, Any]:
    """A deterministic regression batch."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, IN_FEATURES, generator=generator)
    y = torch.randn(size, OUT_FEATURES, generator=generator)
    return x.to(device=device, dtype=dtype), y.to(device=device, dtype=dtype)

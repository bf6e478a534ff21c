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
        torch.nn.Linear(IN_FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT_FEATURES)
    )


def batch(size: int, *, dtype: Any, device: Any, seed: int) -> tuple[Any, Any]:
    """A deterministic regression batch."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, IN_FEATURES, generator=generator)
    y = torch.randn(size, OUT_FEATURES, generator=generator)
    return x.to(device=device, dtype=dtype), y.to(device=device, dtype=dtype)


VOCAB = 32
EMBED = 8
TOKENS = 3


def build_frozen_model(seed: int = 0) -> Any:
    """An embedding that is frozen (`emb`) feeding a trainable head (`head`): the S1 model."""
    import torch

    class FrozenEmbeddingModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(VOCAB, EMBED)
            self.head = torch.nn.Linear(EMBED, OUT_FEATURES)

        def forward(self, ids: Any) -> Any:
            return self.head(self.emb(ids).mean(dim=1))

    torch.manual_seed(seed)
    model = FrozenEmbeddingModel()
    model.emb.weight.requires_grad_(False)
    return model


def token_batch(size: int, *, device: Any, seed: int) -> tuple[Any, Any]:
    """Token ids and regression targets for `build_frozen_model`."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (size, TOKENS), generator=generator)
    y = torch.randn(size, OUT_FEATURES, generator=generator)
    return ids.to(device), y.to(device)

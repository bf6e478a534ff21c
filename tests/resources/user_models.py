"""Model factories a user would pass to `ds-doctor run --model package.module:factory` (the tests' own)."""

from __future__ import annotations

from typing import Any

import torch

VOCAB, WIDTH = 32, 8


class TiedWithBuffers(torch.nn.Module):
    """An LM-shaped module: the head shares the input embedding, a persistent buffer scales the hidden state and a
    non-persistent one holds positions (as rotary `inv_freq` does)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.block = torch.nn.Linear(WIDTH, WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("scale", torch.full((WIDTH,), 0.5))
        self.register_buffer("positions", torch.arange(16, dtype=torch.float32), persistent=False)

    def forward(self, ids: Any) -> Any:
        hidden = torch.tanh(self.block(self.embed(ids))) * self.scale.to(self.block.weight.dtype)
        return self.head(hidden)  # the doctor sums it: the loss of a module whose output is not a scalar


def tied_with_buffers() -> torch.nn.Module:
    return TiedWithBuffers()


def sized(world_size: int) -> torch.nn.Module:
    """A factory that takes the world size (here: one hidden unit more per rank)."""
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, WIDTH), torch.nn.Linear(WIDTH, WIDTH + world_size))


def images() -> tuple[torch.nn.Module, Any]:
    """A model that takes no token ids: it brings its own batches."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(1))

    def make_batch(batch_size: int, device: Any) -> tuple[Any]:
        return (torch.randn(batch_size, 3, 8, 8, device=device),)

    model(make_batch(1, "cpu")[0])  # materialise the lazy layer
    return model, make_batch


def not_a_module() -> dict:
    return {"layers": 3}

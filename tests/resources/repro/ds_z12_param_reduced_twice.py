"""Run: torchrun --nproc-per-node 2 tests/resources/repro/ds_z12_param_reduced_twice.py

ZeRO-2 over a Linear layer that two reentrant checkpointed segments both use (a module called twice, as a
bi-encoder or a tied weight does): each segment's inner backward fires the layer's gradient hooks, so ZeRO meets
the same parameter twice in one backward. CPU, gloo, a torch optimizer (no op build).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint


class Twice(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = checkpoint(self.lin, x, use_reentrant=True)
        h = checkpoint(self.lin, h, use_reentrant=True)
        return h.sum()


def main() -> None:
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    model = Twice()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    loss = engine(torch.randn(1, 8, requires_grad=True))
    engine.backward(loss)
    engine.step()


if __name__ == "__main__":
    main()

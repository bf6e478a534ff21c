"""Run: python tests/resources/repro/ds_moe_param_group_not_marked.py

A model with a DeepSpeed MoE layer under ZeRO-2, its optimizer built over model.parameters() (as the HF Trainer's
default create_optimizer does), so no param group carries 'moe': True. One process, gloo, CPU.
"""

from __future__ import annotations

import os

import torch


class TinyMoE(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from deepspeed.moe.layer import MoE

        self.moe = MoE(hidden_size=8, expert=torch.nn.Linear(8, 8), num_experts=2, k=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.moe(x)[0].sum()


def main() -> None:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29646",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    model = TinyMoE()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    deepspeed.initialize(model=model, optimizer=optimizer, config=config)


if __name__ == "__main__":
    main()

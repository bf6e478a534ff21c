"""Run: python tests/resources/repro/ds_z12_empty_param_group.py

ZeRO-2 over an optimizer with two param groups, one holding only frozen parameters (a frozen first layer given
its own group, as per-module learning rates or a frozen tower do): ZeRO flattens an empty group. One process,
gloo, CPU.
"""

from __future__ import annotations

import os

import torch


def main() -> None:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29657",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    model[0].requires_grad_(False)
    groups = [{"params": model[0].parameters(), "lr": 1e-4}, {"params": model[1].parameters()}]
    optimizer = torch.optim.AdamW(groups, lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    deepspeed.initialize(model=model, optimizer=optimizer, config=config)


if __name__ == "__main__":
    main()

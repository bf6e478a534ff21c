"""Run: python tests/resources/repro/ds_config_unknown_field.py

A ZeRO block carrying a key this DeepSpeed does not know (here "aio", which belongs at the top level of the
config): DeepSpeed's pydantic config model forbids extra keys. One process, gloo, a torch optimizer.
"""

from __future__ import annotations

import os

import torch


def main() -> None:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29631",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 2, "aio": {"block_size": 262144, "queue_depth": 32}},
    }
    deepspeed.initialize(model=model, optimizer=optimizer, config=config)


if __name__ == "__main__":
    main()

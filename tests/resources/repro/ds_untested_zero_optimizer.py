"""Run: python tests/resources/repro/ds_untested_zero_optimizer.py

ZeRO stage 1 with a client optimizer that is not on DeepSpeed's tested list (torch.optim.SGD) and no
"zero_allow_untested_optimizer" in the config. One process, gloo.
"""

from __future__ import annotations

import os

import torch


def main() -> None:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29645",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}}
    deepspeed.initialize(model=model, optimizer=optimizer, config=config)


if __name__ == "__main__":
    main()

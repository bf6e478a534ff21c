"""Run: python tests/resources/repro/ds_load_checkpoint_no_latest.py

A checkpoint saved with save_latest=False (as a copy without its latest file is) loaded without a tag:
DeepSpeed warns and loads nothing. One process, gloo, CPU.
"""

from __future__ import annotations

import os
import tempfile

import torch


def main() -> None:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29656",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}}
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    with tempfile.TemporaryDirectory() as out:
        engine.save_checkpoint(out, tag="global_step1", save_latest=False)
        print("load_checkpoint returned", engine.load_checkpoint(out))


if __name__ == "__main__":
    main()

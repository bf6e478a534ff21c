"""Run: python tests/resources/repro/ds_ckpt_zero_optim_file_missing.py

A checkpoint saved by a ZeRO-0 engine (model states only) resumed by a ZeRO-1 engine with its optimizer
states: the per-rank ZeRO shard it opens was never written. One process, gloo, CPU.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from deepspeed.runtime.engine import DeepSpeedEngine


def engine(stage: int) -> DeepSpeedEngine:
    import deepspeed

    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage}}
    return deepspeed.initialize(model=model, optimizer=optimizer, config=config)[0]


def main() -> None:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29655",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    with tempfile.TemporaryDirectory() as out:
        engine(0).save_checkpoint(out, tag="global_step1")
        engine(1).load_checkpoint(out)


if __name__ == "__main__":
    main()

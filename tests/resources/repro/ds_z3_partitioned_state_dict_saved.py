"""Run: python tests/resources/repro/ds_z3_partitioned_state_dict_saved.py

A ZeRO-3 engine's module saved with a plain state_dict() (no gathering), as a custom save hook does, then loaded
into a fresh copy of the model: every saved tensor is an empty placeholder. One process, gloo, CPU.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch


def build() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))


def main() -> None:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29654",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    model = build()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    with tempfile.TemporaryDirectory() as out:
        path = Path(out) / "model.pt"
        torch.save(engine.module.state_dict(), path)
        build().load_state_dict(torch.load(path))


if __name__ == "__main__":
    main()

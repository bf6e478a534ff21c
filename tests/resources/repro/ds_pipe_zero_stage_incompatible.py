"""Run: python tests/resources/repro/ds_pipe_zero_stage_incompatible.py

A PipelineModule (one stage is enough) given to deepspeed.initialize with a ZeRO stage 2 config: the pipeline
engine refuses partitioned gradients. One process, gloo, CPU.
"""

from __future__ import annotations

import os

import torch


def main() -> None:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29647",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    from deepspeed.pipe import PipelineModule

    layers = [torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)]
    model = PipelineModule(layers=layers, num_stages=1, loss_fn=torch.nn.MSELoss())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    deepspeed.initialize(model=model, optimizer=optimizer, config=config)


if __name__ == "__main__":
    main()

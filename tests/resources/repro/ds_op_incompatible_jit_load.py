"""Run: python tests/resources/repro/ds_op_incompatible_jit_load.py

ZeRO-3 with parameters offloaded to NVMe on a machine without the libaio development files: the async_io op the
swapper needs reports itself incompatible. One process, gloo, CPU; the offload folder is a temporary directory.
"""

from __future__ import annotations

import os
import tempfile

import torch


def main() -> None:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29653",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed

    deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with tempfile.TemporaryDirectory() as nvme:
        config = {
            "train_micro_batch_size_per_gpu": 1,
            "zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": nvme}},
            "zero_force_ds_cpu_optimizer": False,
        }
        deepspeed.initialize(model=model, optimizer=optimizer, config=config)


if __name__ == "__main__":
    main()

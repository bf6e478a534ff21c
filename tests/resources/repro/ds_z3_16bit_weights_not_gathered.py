"""Run: python tests/resources/repro/ds_z3_16bit_weights_not_gathered.py

Accelerate with a ZeRO-3 DeepSpeedPlugin (stage3_gather_16bit_weights_on_model_save left false, as Accelerate
sets it) asked for the model's state dict to save it, as the HF Trainer's save_model does. One process, gloo,
CPU.
"""

from __future__ import annotations

import os

import torch


def main() -> None:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29652",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin

    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=3, gradient_accumulation_steps=1))
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(torch.randn(4, 8), batch_size=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    accelerator.get_state_dict(model)


if __name__ == "__main__":
    main()

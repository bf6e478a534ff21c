"""Run: python tests/resources/repro/acc_ds_multiple_models_one_accelerator.py

A distillation-style script hands the student and a frozen teacher to one `prepare` call under a DeepSpeed plugin
(world size 1 on the CPU, DeepSpeed's CPU accelerator): Accelerate refuses before any engine is built.
"""

import os

import torch
from accelerate import Accelerator, DeepSpeedPlugin


def main() -> None:
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29531",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
    }
    for key, value in env.items():
        os.environ.setdefault(key, value)
    accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(zero_stage=2, gradient_accumulation_steps=1))
    student = torch.nn.Linear(8, 8)
    teacher = torch.nn.Linear(8, 8)
    optimizer = torch.optim.AdamW(student.parameters(), lr=1e-3)
    accelerator.prepare(student, teacher, optimizer)


if __name__ == "__main__":
    main()

"""Run: python tests/resources/repro/ds_fp16_bf16_unsupported_device.py

fp16 enabled in the DeepSpeed config where the detected accelerator says fp16 is unsupported: here DeepSpeed's
CPU accelerator (no oneDNN fp16), as when a CUDA install is not seen and DeepSpeed falls back to the CPU. One
process, gloo, a torch optimizer. A CPU whose oneDNN does fp16 (AVX512-FP16, AMX) supports it: there the script
says so and exits 77 (run_all.py's SKIP), since the failure cannot happen.
"""

from __future__ import annotations

import os

import torch


def main() -> None:
    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29644",
        "RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        os.environ.setdefault(key, value)
    os.environ.setdefault("LOCAL_RANK", "0")
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    if get_accelerator().is_fp16_supported():
        print(f"{get_accelerator().device_name()} supports fp16 here (oneDNN fp16): nothing to refuse")
        raise SystemExit(77)
    deepspeed.init_distributed(dist_backend="gloo")
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {"train_micro_batch_size_per_gpu": 1, "fp16": {"enabled": True}}
    deepspeed.initialize(model=model, optimizer=optimizer, config=config)


if __name__ == "__main__":
    main()

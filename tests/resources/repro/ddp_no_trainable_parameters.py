"""Run: python tests/resources/repro/ddp_no_trainable_parameters.py

A frozen model (every parameter requires_grad=False, like a teacher or a perceptual-loss network) wrapped in
DistributedDataParallel, in a gloo world of one process.
"""

from __future__ import annotations

import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    teacher = torch.nn.Linear(8, 8).requires_grad_(False)
    try:
        DistributedDataParallel(teacher)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

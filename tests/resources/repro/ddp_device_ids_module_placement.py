"""Run: python tests/resources/repro/ddp_device_ids_module_placement.py

DistributedDataParallel given device_ids=[local_rank] for a model left on the CPU (never moved to its GPU), in a
gloo world of one process: DDP refuses the device_ids and names where the parameters are.
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
    model = torch.nn.Linear(8, 8)
    try:
        DistributedDataParallel(model, device_ids=[0])
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Run: python tests/resources/repro/fsdp2_fully_shard_container.py

FSDP2's fully_shard applied to a model's nn.ModuleList of blocks (instead of to each block), on a CPU device
mesh of one gloo process.
"""

from __future__ import annotations

import socket

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    model = Model()
    try:
        fully_shard(model.layers, mesh=mesh)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

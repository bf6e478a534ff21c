"""Run: python tests/resources/repro/c10d_store_clients_not_joined.py

Rank 0 of a world of 2 calls init_process_group alone (the other rank is never started): the TCPStore it hosts
counts the clients that joined and gives up after the timeout with "1/2 clients joined".
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch.distributed as dist


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{free_port()}",
        rank=0,
        world_size=2,
        timeout=timedelta(seconds=3),
    )


if __name__ == "__main__":
    main()

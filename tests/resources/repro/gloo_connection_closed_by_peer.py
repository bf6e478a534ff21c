"""Run: torchrun --nproc-per-node 2 tests/resources/repro/gloo_connection_closed_by_peer.py

Two ranks on gloo; rank 1 leaves after the first barrier (as a rank that ran out of data or crashed would) while
rank 0 goes on to an all_reduce: rank 0's pair to rank 1 reads end-of-stream, "Connection closed by peer".
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    dist.barrier()
    if dist.get_rank() == 1:
        os._exit(0)
    time.sleep(1)
    dist.all_reduce(torch.ones(4))


if __name__ == "__main__":
    main()

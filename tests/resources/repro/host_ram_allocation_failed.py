"""Run: python tests/resources/repro/host_ram_allocation_failed.py

Host RAM runs out: torch asks the CPU allocator for more bytes than the machine can give (here 2**45 floats, 128 TiB,
standing in for a state dict materialised in RAM by every rank, or logits gathered on the CPU), and
DefaultCPUAllocator refuses it before the kernel's OOM killer is involved.
"""

from __future__ import annotations

import torch


def main() -> None:
    torch.empty(2**45, dtype=torch.float32)


if __name__ == "__main__":
    main()

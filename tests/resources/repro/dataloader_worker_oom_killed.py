"""Run: python tests/resources/repro/dataloader_worker_oom_killed.py

A DataLoader worker dies of SIGKILL, as the kernel OOM killer ends it when host RAM runs out: here the worker sends
the signal to itself while loading its first sample, and the main process reports the worker killed.
"""

from __future__ import annotations

import os
import signal

import torch
from torch.utils.data import DataLoader, Dataset


class Samples(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGKILL)
        return torch.zeros(4)


def main() -> None:
    for _ in DataLoader(Samples(), batch_size=2, num_workers=1):
        pass


if __name__ == "__main__":
    main()

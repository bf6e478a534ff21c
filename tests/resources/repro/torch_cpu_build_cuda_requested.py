"""Run: python tests/resources/repro/torch_cpu_build_cuda_requested.py

A model moved to 'cuda' on a torch build without CUDA (the CPU wheel pip resolved, or a macOS build).
"""

from __future__ import annotations

import torch


def main() -> None:
    torch.nn.Linear(4, 4).to("cuda")


if __name__ == "__main__":
    main()

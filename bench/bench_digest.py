"""The replica digest's cost (doctor/watch/replicas.py): the integer sum of every parameter's bit patterns, on
this machine's CPU (a GPU node: the same script there).

Prints the digest's own throughput (GB of parameters per second, and ns per parameter byte) over a set of real
fp32 and bf16 tensors, best of ROUNDS, and what that makes for a 70B model's replica (140 GB in bf16) amortized over
`every=100` steps. Figures are printed, never asserted (issue 34: at most 1 % of a step at every=100)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROUNDS = 5
SEVENTY_B_BYTES = 70e9 * 2  # bf16


def main() -> int:
    import torch

    from ds_doctor.watch.replicas import digests

    torch.manual_seed(0)
    for dtype, label in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        named = [(f"p{i}", torch.randn(4096, 4096).to(dtype)) for i in range(8)]  # 134 M elements
        nbytes = sum(p.numel() * p.element_size() for _, p in named)
        best = float("inf")
        for _ in range(ROUNDS):
            started = time.perf_counter()
            digests(named, torch.device("cpu"))
            best = min(best, time.perf_counter() - started)
        rate = nbytes / best / 1e9
        per_step = SEVENTY_B_BYTES / (rate * 1e9) / 100
        print(
            f"{label}: {nbytes / 1e9:.2f} GB of parameters digested in {best * 1e3:.1f} ms: {rate:.2f} GB/s, "
            f"{best / nbytes * 1e9:.3f} ns per byte; a 70B bf16 replica at every=100: {per_step:.2f} s per step "
            f"amortized ({torch.get_num_threads()} CPU threads)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

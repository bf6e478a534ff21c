"""Run: python tests/resources/repro/clip_grad_norm_nonfinite.py

clip_grad_norm_(..., error_if_nonfinite=True) on gradients that overflowed (one gradient is inf), as a training loop
that clips with that flag raises after an fp16 overflow or a divergent step.
"""

from __future__ import annotations

import torch


def main() -> None:
    model = torch.nn.Linear(4, 2)
    model(torch.ones(3, 4)).sum().backward()
    assert model.weight.grad is not None
    model.weight.grad[0, 0] = float("inf")
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0, error_if_nonfinite=True)


if __name__ == "__main__":
    main()

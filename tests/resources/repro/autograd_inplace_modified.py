"""Run: python tests/resources/repro/autograd_inplace_modified.py

A tensor autograd saved for backward is changed in place before backward reaches it: here sigmoid's output (which
its backward needs) goes through ReLU(inplace=True), as in models that chain an activation into an in-place one.
"""

from __future__ import annotations

import torch


class Gate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.act = torch.nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(torch.sigmoid(self.linear(x)))


def main() -> None:
    Gate()(torch.randn(4, 8)).sum().backward()


if __name__ == "__main__":
    main()

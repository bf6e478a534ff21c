"""Run: python tests/resources/repro/autograd_anomaly_nan.py

Anomaly mode (torch.autograd.set_detect_anomaly / detect_anomaly) stops the backward pass at the first function whose
gradient is NaN: here sqrt of a negative value, as a loss term that goes out of its domain does.
"""

from __future__ import annotations

import torch


def main() -> None:
    x = torch.tensor([4.0, -1.0], requires_grad=True)
    with torch.autograd.detect_anomaly():
        torch.sqrt(x).sum().backward()


if __name__ == "__main__":
    main()

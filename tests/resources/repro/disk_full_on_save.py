"""Run: python tests/resources/repro/disk_full_on_save.py

torch.save of a checkpoint when the file cannot grow: a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes the
writes fail the way a full disk or an exhausted quota does, and the zip writer reports it.
"""

from __future__ import annotations

import os
import resource
import signal
import tempfile

import torch


def main() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 20, resource.RLIM_INFINITY))
    state = {f"layer{i}.weight": torch.randn(1024, 1024) for i in range(3)}
    with tempfile.TemporaryDirectory() as folder:
        torch.save(state, os.path.join(folder, "checkpoint.pt"))


if __name__ == "__main__":
    main()

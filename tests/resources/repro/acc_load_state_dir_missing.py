"""Run: python tests/resources/repro/acc_load_state_dir_missing.py

A resume that names the weights file inside a save_state folder (as a GUI's "resume" field invites) instead of the
folder itself: load_state wants the directory save_state wrote.
"""

import tempfile
from pathlib import Path

import torch
from accelerate import Accelerator


def main() -> None:
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    with tempfile.TemporaryDirectory() as root:
        state = Path(root) / "run-000001-state"
        accelerator.save_state(str(state))
        accelerator.load_state(str(state / "model.safetensors"))


if __name__ == "__main__":
    main()

"""Run: python tests/resources/repro/ds_launcher_include_slot_missing.py

CUDA_VISIBLE_DEVICES=3 set before the deepspeed launcher, which turns it into --include=localhost:3 and checks
slot 3 against the devices it counts on this node (one here): the slot is not there.
"""

from __future__ import annotations

import os
import subprocess
import sys


def main() -> None:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "3"}
    launcher = [sys.executable, "-m", "deepspeed.launcher.runner", "--master_port", "29643"]
    result = subprocess.run([*launcher, __file__], capture_output=True, text=True, env=env)
    print(result.stdout + result.stderr)


if __name__ == "__main__":
    main()

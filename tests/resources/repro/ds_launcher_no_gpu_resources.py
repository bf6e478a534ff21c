"""Run: python tests/resources/repro/ds_launcher_no_gpu_resources.py

The deepspeed launcher told to use the CUDA accelerator (DS_ACCELERATOR=cuda, as on a GPU box whose driver or
container does not expose the GPUs) on a machine where torch sees no CUDA device: it counts 0 devices and stops.
"""

from __future__ import annotations

import os
import subprocess
import sys


def main() -> None:
    env = {**os.environ, "DS_ACCELERATOR": "cuda"}
    launcher = [sys.executable, "-m", "deepspeed.launcher.runner", "--master_port", "29642"]
    result = subprocess.run([*launcher, __file__], capture_output=True, text=True, env=env)
    print(result.stdout + result.stderr)


if __name__ == "__main__":
    main()

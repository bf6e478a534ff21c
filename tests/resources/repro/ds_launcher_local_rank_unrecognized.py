"""Run: python tests/resources/repro/ds_launcher_local_rank_unrecognized.py

Starts itself under the deepspeed launcher (`python -m deepspeed.launcher.runner --num_gpus 1`, the CPU
accelerator here); the launched rank parses its arguments with an argparse that has no --local_rank, as many
training scripts do, and exits on the --local_rank=0 the launcher appends.
"""

from __future__ import annotations

import argparse
import subprocess
import sys


def rank() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--as-rank", action="store_true")
    parser.add_argument("--lr", type=float, default=1e-3)
    print(parser.parse_args())


def main() -> None:
    launcher = [
        sys.executable,
        "-m",
        "deepspeed.launcher.runner",
        "--num_gpus",
        "1",
        "--master_port",
        "29641",
    ]
    result = subprocess.run([*launcher, __file__, "--as-rank", "--lr", "0.1"], capture_output=True, text=True)
    print(result.stdout + result.stderr)


if __name__ == "__main__":
    rank() if "--as-rank" in sys.argv else main()

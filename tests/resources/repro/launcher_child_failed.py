"""Run: python tests/resources/repro/launcher_child_failed.py

Starts torchrun with 2 workers, one of which raises an error of the user's own (no catalog entry names it), and
prints what many tickets hold of such a run: torchrun's closing summary alone (the agent's ChildFailedError, rank 1
with exitcode 1), not the traceback the rank printed above it.
"""

from __future__ import annotations

import os
import subprocess
import sys


def worker() -> None:
    if os.environ["RANK"] == "1":
        raise RuntimeError("the batch this rank built has no rows")


def main() -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", __file__]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    # the agent's own traceback, which ends in the summary table: what is left when the rank's output is not pasted
    print(done.stderr[done.stderr.rindex("Traceback (most recent call last)") :])


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        worker()
    else:
        main()

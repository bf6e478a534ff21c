"""Run: python tests/resources/repro/distributed_hang_no_error.py

Two ranks (torchrun, gloo) that take different paths: rank 0 enters an all_reduce that rank 1 never calls (a
collective under a rank condition, as a save or an evaluation on rank 0 often has). Nothing is printed and no error
comes: the job hangs. Prints what py-spy shows of the waiting rank (`py-spy dump --pid`), then stops the job.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker() -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    Path(os.environ["REPRO_READY"], str(os.getpid())).write_text(os.environ["RANK"])
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins it
    time.sleep(120)


def main() -> None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    with tempfile.TemporaryDirectory() as ready:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", __file__]
        env = dict(os.environ, REPRO_READY=ready)
        job = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        try:
            while len(os.listdir(ready)) < 2:
                time.sleep(0.2)
            time.sleep(2)  # rank 0 is inside the all_reduce by now
            rank0 = next(int(p) for p in os.listdir(ready) if Path(ready, p).read_text() == "0")
            dump = subprocess.run(
                [spy, "dump", "--pid", str(rank0)], capture_output=True, text=True, timeout=60
            )
            print(dump.stdout or dump.stderr)
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        worker()
    else:
        main()

"""Run: python tests/resources/repro/torchrun_agent_sighup.py

Starts torchrun (2 workers that sleep) and sends its agent SIGHUP, as a closing terminal or SSH session does:
the agent stops the workers and raises SignalException "got signal: 1". Prints torchrun's stderr.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKERS = 2


def worker() -> None:
    Path(os.environ["REPRO_READY"], os.environ["LOCAL_RANK"]).touch()
    time.sleep(50)


def main() -> None:
    with tempfile.TemporaryDirectory() as ready:
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORKERS), __file__]
        env = dict(os.environ, REPRO_READY=ready)
        agent = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
        while len(os.listdir(ready)) < WORKERS:
            time.sleep(0.2)
        agent.send_signal(signal.SIGHUP)
        _, stderr = agent.communicate(timeout=50)
    print(stderr)


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        worker()
    else:
        main()

"""Run: python tests/resources/repro/native_crash_segfault.py

A native crash (SIGSEGV: here a read of address 0 through ctypes, as a broken extension does) seen the three ways a
ticket shows one: the shell's "Segmentation fault (core dumped)" line, Python's faulthandler ("Fatal Python error:
Segmentation fault" and the crashing thread's frames), and torchrun's summary of a rank it lost to signal 11.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

CRASH = "import ctypes; ctypes.string_at(0)"


def worker() -> None:
    if os.environ["RANK"] == "1":
        exec(CRASH)


def main() -> None:
    python = shlex.quote(sys.executable)
    # the shell reports a child it lost to a signal (a second command keeps bash from exec'ing the first)
    shell = f"ulimit -c 0; {python} -X faulthandler -c {shlex.quote(CRASH)}; exit $?"
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60, check=False)
    print(done.stderr)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", __file__]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    print(done.stderr[done.stderr.rindex("Traceback (most recent call last)") :])


if __name__ == "__main__":
    if "LOCAL_RANK" in os.environ:
        worker()
    else:
        main()

"""Run: python tests/resources/repro/ds_launcher_ssh_unreachable.py

The deepspeed launcher given a hostfile whose host does not accept ssh (127.0.0.1 on a port where no sshd
listens, so nothing leaves the machine): its passwordless-ssh check fails before any rank starts.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        hostfile = Path(tmp) / "hostfile"
        hostfile.write_text("127.0.0.1 slots=1\n")
        launcher = [
            sys.executable,
            "-m",
            "deepspeed.launcher.runner",
            "--hostfile",
            str(hostfile),
            "--ssh_port",
            "1",
        ]
        result = subprocess.run([*launcher, __file__], capture_output=True, text=True)
    print(result.stdout + result.stderr)


if __name__ == "__main__":
    main()

"""Process-tree hygiene for launches: kill a whole tree, and never outlive the parent."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys

KILL_GRACE_S = 2.0  # keeps a timed-out case within its limit + 5 s (poll + grace + reap)


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM torchrun and every process below it, then SIGKILL what is left after KILL_GRACE_S.

    torchrun starts each rank in a session of its own, so signalling torchrun's process group does
    not reach the ranks: the tree is walked instead (psutil), before anything is signalled.
    """
    import psutil

    try:
        root = psutil.Process(proc.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for member in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.terminate()
    _, alive = psutil.wait_procs(tree, timeout=KILL_GRACE_S)
    for member in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(alive, timeout=KILL_GRACE_S)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)


def die_with_parent() -> None:
    """Linux: this process gets SIGTERM when its parent dies, so a killed doctor leaves no launch behind."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

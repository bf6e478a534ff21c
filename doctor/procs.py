"""Process-tree hygiene for launches: kill a whole tree, never outlive the parent, start from a user's folder
without importing the user's look-alike packages, and end whatever user code left running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

#: A process of ds-doctor's (a rank's worker, the exchange, the --model check) started from the user's folder:
#: `python -m` would put that folder first on sys.path. ds-doctor's one import name (`ds_doctor`) shadows nothing
#: a project holds, but a project's own `ds_doctor` would still win there: the folder goes last instead, so the
#: user's --model module still imports, and ds-doctor is imported before it is there (an editable install's finder
#: comes after the path search, so a look-alike would win even from the end of the path).
BOOT = (
    "import os, runpy, sys; cwd = os.getcwd(); "
    "sys.path[:] = [p for p in sys.path if p not in ('', '.', cwd)]; "
    "import ds_doctor; sys.path.append(cwd); "
    "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
)


def module_command(module: str) -> list[str]:
    """`python -m module`, with the working directory after ds-doctor's own packages on the path."""
    return [sys.executable, "-c", BOOT.format(module=module)]


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
    terminate_then_kill(tree)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=KILL_GRACE_S)


def die_with_parent() -> None:
    """Linux: this process gets SIGTERM when its parent dies, so a killed doctor leaves no launch behind."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def become_subreaper() -> None:
    """Linux: orphans below this process (a daemon a --model factory started, double-forked into a session of its
    own) are re-parented here rather than to init, so `end_descendants` still finds them."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER


def end_descendants(spare: set[int] = frozenset()) -> int:  # type: ignore[assignment]
    """SIGTERM, then SIGKILL, every process still below this one but those in `spare` (there before the run):
    the run is over, and nothing it started may outlive it. The number ended."""
    import psutil

    try:
        tree = [p for p in psutil.Process().children(recursive=True) if p.pid not in spare]
    except psutil.Error:
        return 0
    terminate_then_kill(tree)
    return len(tree)


def terminate_then_kill(tree: list[Any]) -> None:
    """SIGTERM every process of `tree` (psutil processes), then SIGKILL what is left after KILL_GRACE_S."""
    import psutil

    for member in tree:
        with contextlib.suppress(psutil.Error):
            member.terminate()
    _, alive = psutil.wait_procs(tree, timeout=KILL_GRACE_S)
    for member in alive:
        with contextlib.suppress(psutil.Error):
            member.kill()
    psutil.wait_procs(alive, timeout=KILL_GRACE_S)


def tree_of(pid: int) -> set[int]:
    """`pid` and every process below it now (empty when it is gone): what a launch started, against which a pid
    read from a file is checked before anything is signalled or attached to."""
    import psutil

    try:
        root = psutil.Process(pid)
        return {pid, *(child.pid for child in root.children(recursive=True))}
    except psutil.Error:
        return set()


def descendants() -> set[int]:
    """Every process below this one now."""
    return tree_of(os.getpid()) - {os.getpid()}


@contextlib.contextmanager
def reaping() -> Iterator[None]:
    """Everything started inside the block (user code's daemons too) ends with it; what ran before is spared."""
    become_subreaper()
    before = descendants()
    try:
        yield
    finally:
        end_descendants(spare=before)

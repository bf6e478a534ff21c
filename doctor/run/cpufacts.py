"""The CPU facts DeepSpeed asks py-cpuinfo for, computed once per run and handed to every rank.

DeepSpeed's op builders (`cpu_arch()`, `simd_width()` in op_builder/builder.py) and `DeepSpeedCPUAdam.__init__` call
`cpuinfo.get_cpu_info()` about five times per rank per launch, and each call starts a Python subprocess (~1.1 s):
about 12 s of a 33-s `run --level 2` on 2 cores (issue 38). The parent asks once per run for the JSON py-cpuinfo's own
subprocess prints (`get_cpu_info_json()`) and writes it into the run directory; each rank's `get_cpu_info_json` then
answers with that text, and `get_cpu_info()` parses it exactly as it parses its subprocess's output: the same dict,
not a copy made another way. A node computes its own (each node of a multi-node run has its own run directory).

The parent does not wait for the answer: a process of its own asks while the first launches start (1.1 s that would
otherwise come before them), and a rank waits for the file only when DeepSpeed first asks, long after its imports.
Where no answer comes (py-cpuinfo failed there, or took over `WAIT_S`), the rank asks py-cpuinfo itself, as
DeepSpeed would have.

The answer is also kept in ds-doctor's own cache, under a key of what it is computed from: /proc/cpuinfo less its
clock lines (the model, its flags, the count), py-cpuinfo's version and this Python. The next run on the node copies
it (a nightly job, `bisect`, `fleet`'s nodes, a test suite: 1.1 s of CPU each, and a process). A CPU that changed
(another VM host, a microcode's flags) is another key. Only a folder this user alone can write is read or written
(`untrusted_folder`): the answer chooses the instructions DeepSpeed builds its ops with, and another user's planted
answer would choose them for root.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from ds_doctor.files import untrusted_folder, write_atomic
from ds_doctor.rundir import read_own

CPUINFO_ENV = "DS_DOCTOR_CPUINFO_JSON"
FILE = "cpuinfo.json"
FAILED = (
    "cpuinfo.failed"  # written instead where py-cpuinfo failed: the ranks stop waiting and ask it themselves
)
WAIT_S = 30.0  # a rank's wait for the answer, at DeepSpeed's first question
_ASKING: dict[Path, subprocess.Popen[bytes]] = {}
PROC_CPUINFO = Path("/proc/cpuinfo")
MAX_BYTES = 1 << 20  # a kept answer is a few KB; /proc/cpuinfo of 512 threads about 1 MB
_CLOCK = ("cpu mhz", "bogomips")  # lines that move with the clock, not with the CPU


def cache_key(cpuinfo_text: str, version: str) -> str:
    """The key of an answer: what py-cpuinfo computes it from, less the lines that change by the second."""
    kept = [line for line in cpuinfo_text.splitlines() if not line.strip().lower().startswith(_CLOCK)]
    digest = hashlib.sha256()
    for part in ("\n".join(kept), version, sys.version, sys.executable, platform.machine()):
        digest.update(part.encode("utf-8", "backslashreplace") + b"\0")
    return digest.hexdigest()[:32]


def kept_path(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where this node's kept answer is (None where /proc/cpuinfo or py-cpuinfo cannot be read: nothing kept)."""
    env = os.environ if environ is None else environ
    try:
        with PROC_CPUINFO.open("rb") as handle:
            text = handle.read(MAX_BYTES).decode("utf-8", "replace")
        import importlib.metadata

        version = importlib.metadata.version("py-cpuinfo")
    except Exception:
        return None
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "ds-doctor" / "cpuinfo" / f"{cache_key(text, version)}.json"


def _read_kept(path: Path) -> str | None:
    """The kept answer at `path` where its folder and the file are this user's alone (`read_own`: a regular file,
    never followed through a link), and it is py-cpuinfo's JSON."""
    if untrusted_folder(path.parent) is not None:
        return None
    text = read_own(path, MAX_BYTES)
    try:
        return text if text is not None and isinstance(json.loads(text), dict) else None
    except ValueError:
        return None


def _keep(path: Path | None, text: str) -> None:
    """The answer kept for the next run, where its folder is (or can be made) this user's alone; else nothing."""
    if path is None:
        return
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if untrusted_folder(path.parent) is None:
            write_atomic(path, text, fsync=False)
    except OSError:
        pass  # a read-only or full home: the next run asks again


def computed(run_root: Path) -> Path | None:
    """The run's py-cpuinfo answer, asked now (None where py-cpuinfo is not installed or fails: the ranks then ask
    it themselves, as DeepSpeed would)."""
    path = run_root / FILE
    if path.is_file():
        return path
    try:
        import cpuinfo

        kept = kept_path()
        text = cpuinfo.get_cpu_info_json()
        text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
        json.loads(text)
    except Exception:  # py-cpuinfo's own failure is DeepSpeed's to meet, in the rank, as without this cache
        write_atomic(run_root / FAILED, "", fsync=False)
        return None
    write_atomic(path, text, fsync=False)
    _keep(kept, text)
    return path


def ask(run_root: Path) -> Path | None:
    """Start asking py-cpuinfo for the run, once, in a process of its own, and return the path its answer will have
    (None where py-cpuinfo is not installed: nothing to ask)."""
    import importlib.util

    from ds_doctor.procs import module_command

    path = run_root / FILE
    if path.is_file() or run_root in _ASKING:
        return path
    if importlib.util.find_spec("cpuinfo") is None:
        return None
    if (kept := kept_path()) is not None and (text := _read_kept(kept)) is not None:
        write_atomic(path, text, fsync=False)  # an earlier run's answer on this CPU: no process, no second
        return path
    _ASKING[run_root] = subprocess.Popen(
        [*module_command(__name__), str(run_root)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return path


def answer(path: Path, wait_s: float = WAIT_S) -> str | None:
    """The run's answer once it is written, or None where py-cpuinfo failed there or nothing came in `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            text = path.read_text(encoding="utf-8")
            json.loads(text)
            return text
        except (OSError, ValueError):
            pass
        if (path.parent / FAILED).exists() or time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def reuse(environ: Mapping[str, str] = os.environ, wait_s: float = WAIT_S) -> bool:
    """In a rank: py-cpuinfo answers with the run's JSON, waiting for it at the first question (where the parent
    asks for one and py-cpuinfo is installed); without it, py-cpuinfo's own answer."""
    name = environ.get(CPUINFO_ENV)
    if not name:
        return False
    try:
        import cpuinfo
        import cpuinfo.cpuinfo as module
    except ImportError:
        return False
    own: Callable[[], str] = module.get_cpu_info_json
    known: list[str | None] = []

    def get_cpu_info_json() -> str:
        if not known:
            known.append(answer(Path(name), wait_s))
        return known[0] if known[0] is not None else own()

    module.get_cpu_info_json = get_cpu_info_json  # what get_cpu_info() calls, by its module's name
    cpuinfo.get_cpu_info_json = get_cpu_info_json
    return True


if __name__ == "__main__":  # `ask`'s process: the answer into the run directory named
    computed(Path(sys.argv[1]))

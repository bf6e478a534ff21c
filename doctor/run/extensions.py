"""Where the ranks JIT-build DeepSpeed's ops, and the one line a first run says about it.

torch builds a JIT extension into `TORCH_EXTENSIONS_DIR`, by default `~/.cache/torch_extensions/py311_cpu/<op>`:
one folder per Python and accelerator, shared by every environment of the user. Two environments with different
DeepSpeed releases (common on shared clusters) then rebuild the same op into the same folder, and a rank of one can
load the other's half-rebuilt module: `module 'deepspeed_shm_comm' has no attribute 'vector_kernel_level'` (the known
issue `ds_op_module_from_another_build`). ds-doctor's ranks build into a folder of their own, keyed by the
interpreter, torch and the DeepSpeed install, unless the user set `TORCH_EXTENSIONS_DIR` (theirs to choose). An
overlay (`--with`) has its own (`RankOptions.with_overlay`).

A cold build takes minutes, and off a terminal a run would print nothing meanwhile: the parent says so, once, before
the first launch, naming the folder."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from ds_doctor.stacks.overlay import installed

#: the op every accelerator's DeepSpeed builds for the probes (probes/shared/common.py OPS: CPUAdamBuilder)
FIRST_OP = "cpu_adam"


def _version(distribution: str) -> str:
    return installed(distribution) or "none"


def build_key() -> str:
    """The interpreter, torch and the DeepSpeed install, readable where it can be and hashed where it must be."""
    spec = importlib.util.find_spec("deepspeed")
    where = str(Path(spec.origin).resolve().parent) if spec is not None and spec.origin else "none"
    identity = "\0".join(
        (
            os.path.realpath(sys.executable),
            sys.prefix,
            sys.version,
            _version("torch"),
            _version("deepspeed"),
            where,
        )
    )
    digest = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:10]
    torch = _version("torch").replace("+", "-")
    return (
        f"py{sys.version_info.major}{sys.version_info.minor}-torch{torch}-ds{_version('deepspeed')}-{digest}"
    )


def private_extensions_dir(environ: Mapping[str, str]) -> str | None:
    """The folder the ranks build into, or None where the user chose one (TORCH_EXTENSIONS_DIR) or DeepSpeed is not
    installed (nothing to build)."""
    if environ.get("TORCH_EXTENSIONS_DIR") or importlib.util.find_spec("deepspeed") is None:
        return None
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "ds-doctor", "torch_extensions", build_key())


def interpreter_first(path: str | None) -> str:
    """`path` (a PATH value) with this interpreter's folder first: torch's JIT runs `ninja` from PATH, and another
    ninja (the system's 1.11 against the venv's 1.13) records builds differently, so every op was rebuilt (100-225 s)
    when the venv's ds-doctor ran with the system's ninja first. What builds the ops and what loads them use this."""
    return os.pathsep.join([os.path.dirname(sys.executable), path if path is not None else os.defpath])


def first_build_line(folder: str | None) -> str | None:
    """The line a run says before its first launch when the ops are not built there yet; None when they are."""
    if folder is None or (Path(folder) / FIRST_OP / f"{FIRST_OP}.so").exists():
        return None
    return (
        f"ds-doctor: DeepSpeed's ops ({FIRST_OP} and the others this accelerator has) are not built in {folder} "
        "yet: the first launch that needs them builds them once (a few minutes); later runs load them"
    )


def built_ops(folder: str | None) -> dict[str, int]:
    """Each op built in `folder` (its .so) and when, to the nanosecond: what a run compares after its launches."""
    if folder is None or not os.path.isdir(folder):
        return {}
    found = {}
    for op in sorted(os.listdir(folder)):
        library = Path(folder) / op / f"{op}.so"
        with contextlib.suppress(OSError):
            found[op] = library.stat().st_mtime_ns
    return found


def rebuilt_line(folder: str | None, before: Mapping[str, int]) -> str | None:
    """One line where the run's launches built ops in `folder`: which, and why (none there yet, or a build record
    this environment did not match: torch's JIT rebuilds when build.ninja or ninja's own log differ, e.g. another
    `ninja` first on PATH, other compiler flags)."""
    after = built_ops(folder)
    new = sorted(op for op in after if op not in before)
    again = sorted(op for op in after if op in before and after[op] != before[op])
    if not new and not again:
        return None
    parts = []
    if new:
        parts.append(f"built {', '.join(new)} (not built there before)")
    if again:
        parts.append(
            f"rebuilt {', '.join(again)}: their build record did not match this run's (another ninja first on PATH, "
            "other compiler flags or headers)"
        )
    return f"ds-doctor: DeepSpeed's ops in {folder}: {'; '.join(parts)}; later runs load them"

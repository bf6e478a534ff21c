"""Where DeepSpeed's ops are built: the folder the user's own jobs in this environment use, unless another
environment's builds are there.

torch builds a JIT extension into `TORCH_EXTENSIONS_DIR`, by default `~/.cache/torch_extensions/py311_cpu/<op>`: one
folder per Python and accelerator, shared by every environment of the user. A user's training job in the same
environment as ds-doctor builds there (DeepSpeed's `OpBuilder.load`), so ds-doctor builds there too: one build serves
both, whichever comes first. But two environments with different DeepSpeed or torch installs rebuild the same op
into that folder in turn, and a process of one can load the other's half-rebuilt module (the known issue
`ds_op_module_from_another_build`). Each op folder's `build.ninja` names the torch headers and DeepSpeed sources it
was built from: where one names another environment's, ds-doctor builds into a folder of its own keyed by the
interpreter, torch and the DeepSpeed install (`private_root`), and says how a job shares it. A `TORCH_EXTENSIONS_DIR`
the user set is theirs to choose, and an overlay (`--with`) has its own (`RankOptions.with_overlay`).

This module imports torch only inside `choose_root`, which the build process (`ds_doctor.ops.child`) calls."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "none"


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


def private_root(environ: Mapping[str, str]) -> Path:
    """ds-doctor's own folder for this environment's builds."""
    cache = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "ds-doctor" / "torch_extensions" / build_key()


_INCLUDE = re.compile(r"-isystem\s+(\S+)/torch/include(?:\s|$)")
_SOURCE = re.compile(r"^build\s+\S+:\s+\w+\s+(\S+)", re.MULTILINE)


def foreign_builder(ninja_text: str, torch_dir: Path, deepspeed_dir: Path) -> str | None:
    """Where an op's `build.ninja` names torch headers or DeepSpeed sources other than this environment's: the other
    install (a path, for the line that says so); None where it is this environment's build."""
    for match in _INCLUDE.finditer(ninja_text):
        if os.path.realpath(os.path.join(match.group(1), "torch")) != os.path.realpath(torch_dir):
            return os.path.join(match.group(1), "torch")
    here = os.path.realpath(deepspeed_dir)
    for match in _SOURCE.finditer(ninja_text):
        source = os.path.realpath(match.group(1))
        if source.endswith((".cpp", ".cu", ".c", ".cc")) and not source.startswith(here + os.sep):
            return match.group(1)
    return None


def others_build(root: Path, ops: Iterable[str], torch_dir: Path, deepspeed_dir: Path) -> str | None:
    """The line's words where an op under `root` was built by another environment; None where none was."""
    for op in ops:
        try:
            text = (root / op / "build.ninja").read_text(encoding="utf-8", errors="replace")[:65536]
        except OSError:
            continue
        other = foreign_builder(text, torch_dir, deepspeed_dir)
        if other is not None:
            return f"{op} there was built from {other}"
    return None


def choose_root(environ: Mapping[str, str], ops: Iterable[str]) -> tuple[Path, str]:
    """The folder this environment's ops are built in, and why (in words). Imports torch and DeepSpeed."""
    given = environ.get("TORCH_EXTENSIONS_DIR")
    if given:
        return Path(given), "TORCH_EXTENSIONS_DIR names it"
    import deepspeed
    import torch
    from torch.utils.cpp_extension import _get_build_directory

    made = Path(_get_build_directory("ds-doctor-where", verbose=False))  # torch's own rule for the folder
    default = made.parent
    with contextlib.suppress(OSError):
        made.rmdir()
    other = others_build(default, ops, Path(torch.__file__).parent, Path(deepspeed.__file__).parent)
    if other is None:
        return (
            default,
            "torch's default folder: your jobs in this environment build and load the same ops there",
        )
    private = private_root(environ)
    return private, (
        f"torch's default folder {default} holds another environment's builds ({other}): ds-doctor builds into its "
        f"own, so as not to rebuild theirs; a job of this environment shares it with TORCH_EXTENSIONS_DIR={private}"
    )


#: what a build phase that left every op in place writes into the folder, for the next run's quick look
STAMP = "ds-doctor-ops-{key}.json"


def _torch_accelerator() -> str | None:
    """torch's folder suffix (`cpu`, `cu121`, `rocm60`) read from its version.py, without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text(encoding="utf-8")
    except OSError:
        return None
    hip = re.search(r"^hip(?::[^=]*)?\s*=\s*'([\d.]+)'", text, re.MULTILINE)
    cuda = re.search(r"^cuda(?::[^=]*)?\s*=\s*'([\d.]+)'", text, re.MULTILINE)
    if hip:
        return "rocm" + hip.group(1).replace(".", "")
    return "cu" + cuda.group(1).replace(".", "") if cuda else "cpu"


def likely_root(environ: Mapping[str, str]) -> Path | None:
    """Where `choose_root` would choose, worked out without importing torch (None where it cannot be): the quick
    look a run takes before it starts the build phase at all."""
    if environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(environ["TORCH_EXTENSIONS_DIR"])
    accelerator = _torch_accelerator()
    if accelerator is None:
        return None
    base = environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    return Path(os.path.realpath(os.path.join(base, "torch_extensions"))) / f"{python}_{accelerator}"


def library_mtime(root: Path, op: str) -> int | None:
    """When `op`'s library under `root` was last written (ns), None where there is none."""
    try:
        return (root / op / f"{op}.so").stat().st_mtime_ns
    except OSError:
        return None


def write_stamp(root: Path, ops: Iterable[str]) -> None:
    """The ops the phase left in `root`, as they are now."""
    found = {op: library_mtime(root, op) for op in ops}
    with contextlib.suppress(OSError):
        (root / STAMP.format(key=build_key())).write_text(json.dumps({"ops": found}) + "\n", encoding="utf-8")


def stamped(root: Path | None) -> bool:
    """Whether a build phase of this environment left every op it built in `root` as it is now, with no build lock
    in their folders: the run needs no build phase."""
    if root is None:
        return False
    try:
        data = json.loads((root / STAMP.format(key=build_key())).read_text(encoding="utf-8")[:65536])
        ops = data["ops"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if not isinstance(ops, dict):
        return False
    return all(
        isinstance(mtime, int) and library_mtime(root, op) == mtime and not (root / op / "lock").exists()
        for op, mtime in ops.items()
    )


def stamped_root(environ: Mapping[str, str]) -> Path | None:
    """The folder a build phase of this environment left every op in, unchanged: `TORCH_EXTENSIONS_DIR` where it is
    set, else torch's default folder, or ds-doctor's own where that phase found another environment's builds in the
    default; None where none is (the phase must run)."""
    likely = likely_root(environ)
    candidates = (likely,) if environ.get("TORCH_EXTENSIONS_DIR") else (likely, private_root(environ))
    return next((root for root in candidates if root is not None and stamped(root)), None)

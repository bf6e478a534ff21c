"""DeepSpeed's op table and install facts (`ds-doctor env`'s `deepspeed` section), as `ds_report` shows them,
found without importing torch or DeepSpeed.

`ds_report` decides its columns so (deepspeed/env_report.py): *installed* is `installed_ops[op]` from
`deepspeed.git_version_info` (written into `git_version_info_installed.py` when the wheel was built with
`DS_BUILD_OPS`) and only while the accelerator it was built for is the one in use; *compatible* is the op builder's
`is_compatible()`, which needs torch and DeepSpeed imported (`ds-doctor env --full` asks them in a child process,
`ds_doctor.hardware.runtime`). Here the build file is parsed, not imported; the accelerator is the one DeepSpeed's
`get_accelerator()` would pick as far as it can be told without torch (DS_ACCELERATOR, a vendor's torch plugin
installed, a CUDA build of torch with a GPU NVML sees); and each op's JIT build is looked for in torch's extensions
folder (what the user's jobs load) and in ds-doctor's own (what `ds-doctor run` builds where torch's folder holds
another environment's builds).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: a vendor's torch plugin that makes DeepSpeed pick its accelerator, in get_accelerator()'s order of detection
VENDOR_PLUGINS = (
    ("torch_npu", "npu"),
    ("torch_sdaa", "sdaa"),
    ("habana_frameworks", "hpu"),
    ("torch_mlu", "mlu"),
    ("torch_supa", "supa"),
    ("torch_xmlir", "klxpu"),
)
NOT_ASKED = (
    "not checked: `ds-doctor env --full` asks DeepSpeed (imports torch and DeepSpeed in a child process)"
)


def package_dir(name: str) -> str | None:
    """Where an installed package's folder is (no import: its spec only)."""
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            return str(next(iter(spec.submodule_search_locations)))
    return None


def build_info(deepspeed_dir: str) -> tuple[dict[str, Any], str | None]:
    """The literals of DeepSpeed's `git_version_info_installed.py` (installed_ops, accelerator_name, torch_info,
    version), parsed, not run; or why there are none."""
    path = Path(deepspeed_dir) / "git_version_info_installed.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace")[:200_000])
    except (OSError, SyntaxError, ValueError) as exc:
        return {}, f"{path.name} not read ({type(exc).__name__}): a source checkout of DeepSpeed has none"
    info: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(ValueError, TypeError, SyntaxError, RecursionError):
                info[node.targets[0].id] = ast.literal_eval(node.value)
    return info, None


def mapping(value: Any) -> dict[str, Any]:
    """A literal of the build file that should be a dict, or an empty one (a hand-edited file)."""
    return dict(value) if isinstance(value, dict) else {}


def torch_extensions_folder(
    environ: Mapping[str, str], torch_cuda: str | None, torch_hip: str | None
) -> str | None:
    """The folder torch JIT-builds extensions into for this interpreter (cpp_extension._get_build_directory):
    TORCH_EXTENSIONS_DIR, else `<cache>/torch_extensions/py311_cu121` (cpu, cuXYZ or rocmXY)."""
    if environ.get("TORCH_EXTENSIONS_DIR"):
        return environ["TORCH_EXTENSIONS_DIR"]
    if sys.platform == "darwin":
        cache = os.path.expanduser("~/Library/Caches")
    elif os.name == "posix":
        cache = environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    else:
        return None  # Windows: torch's appdirs folder; not worked out here
    accelerator = (
        f"rocm{torch_hip.replace('.', '')}"
        if torch_hip
        else f"cu{torch_cuda.replace('.', '')}"
        if torch_cuda
        else "cpu"
    )
    build = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_{accelerator}"
    return os.path.join(os.path.realpath(os.path.join(cache, "torch_extensions")), build)


def ds_doctor_folder(environ: Mapping[str, str]) -> str | None:
    """ds-doctor's own folder for this environment's builds (ds_doctor.ops.cache), None where this tree has none."""
    try:
        from ds_doctor.ops.cache import private_root
    except ImportError:
        return None
    return str(private_root(environ))


def predict_accelerator(environ: Mapping[str, str], *, torch_cuda: str | None, gpus: int) -> tuple[str, str]:
    """The accelerator DeepSpeed's get_accelerator() would pick, and how that was told, without importing torch."""
    if environ.get("DS_ACCELERATOR"):
        return environ["DS_ACCELERATOR"], "DS_ACCELERATOR sets it"
    for module, name in VENDOR_PLUGINS:
        if package_dir(module) is not None:
            return name, f"predicted: {module} is installed"
    if torch_cuda and gpus:
        return "cuda", f"predicted: a CUDA {torch_cuda} build of torch and {gpus} GPU(s) NVML sees"
    why = "torch is a CPU build" if not torch_cuda else "no GPU NVML sees"
    return "cpu", f"predicted: {why}; `--full` asks DeepSpeed, which also sees XPU and MPS devices"


def built_in(folder: str | None, op: str) -> bool:
    return folder is not None and os.path.isfile(os.path.join(folder, op, f"{op}.so"))


def op_rows(
    info: Mapping[str, Any], accelerator: str, folders: Mapping[str, str | None]
) -> list[dict[str, Any]]:
    """One row per op DeepSpeed's build file names (and any other op found built in the folders)."""
    installed_ops = mapping(info.get("installed_ops"))
    names = list(installed_ops)
    for folder in folders.values():
        if folder is not None and os.path.isdir(folder):
            with contextlib.suppress(OSError):
                names += sorted(op for op in os.listdir(folder) if op not in names and built_in(folder, op))
    same_accelerator = info.get("accelerator_name") == accelerator
    return [
        {
            "name": op,
            "installed": bool(installed_ops.get(op)) and same_accelerator,
            "compatible": None,
            "jit_built": [label for label, folder in folders.items() if built_in(folder, op)],
        }
        for op in names
    ]


def git_commit(info: Mapping[str, Any]) -> str | None:
    """The commit and branch the build recorded; None for a wheel from PyPI (`unknown`) or a checkout (`[none]`)."""
    if info.get("git_hash") in (None, "unknown", "[none]"):
        return None
    return f"{info['git_hash']} ({info.get('git_branch')})"


def collect_deepspeed(
    environ: Mapping[str, str] | None = None, *, torch: Mapping[str, Any], gpus: int
) -> dict[str, Any]:
    """The `deepspeed` section. `torch` holds torch's `version`, `cuda` and `hip` as its version.py says them."""
    environ = dict(os.environ if environ is None else environ)
    where = package_dir("deepspeed")
    out: dict[str, Any] = {"install_path": where, "torch_install_path": package_dir("torch")}
    unavailable: dict[str, str] = {}
    if out["torch_install_path"] is None:
        unavailable["torch_install_path"] = "not installed"
    if where is None:
        out.update(ops=[], unavailable={**unavailable, "install_path": "not installed"})
        return out
    info, reason = build_info(where)
    if reason:
        unavailable["ops"] = f"which ops this DeepSpeed has is unknown without --full: {reason}"
    accelerator, how = predict_accelerator(environ, torch_cuda=torch.get("cuda"), gpus=gpus)
    folders = {
        "torch": torch_extensions_folder(environ, torch.get("cuda"), torch.get("hip")),
        "ds-doctor": ds_doctor_folder(environ),
    }
    torch_info = mapping(info.get("torch_info"))
    out.update(
        accelerator=accelerator,
        accelerator_how=how,
        built_for=info.get("accelerator_name") or None,
        built_with_torch=torch_info.get("version"),
        built_with_cuda=torch_info.get("cuda_version"),
        git=git_commit(info),
        jit_folders=folders,
        ops=op_rows(info, accelerator, folders),
    )
    unavailable["compatible"] = NOT_ASKED
    if not out["built_for"]:
        unavailable["built_for"] = "unknown: the build file does not say"
    out["unavailable"] = unavailable
    return out


def merge_runtime(section: dict[str, Any], asked: Mapping[str, Any]) -> dict[str, Any]:
    """The section with what DeepSpeed itself said (`ds_doctor.hardware.runtime`): its accelerator, its ops, and
    each op's compatibility (with the first warning it printed where it is not). A failed ask leaves every
    compatibility unknown with its reason."""
    unavailable = dict(section.get("unavailable") or {})
    if "error" in asked:
        unavailable["compatible"] = str(asked["error"])
        return {**section, "unavailable": unavailable}
    answered = {op["name"]: op for op in asked.get("ops") or ()}
    rows = {row["name"]: dict(row) for row in section.get("ops") or ()}
    for name, op in answered.items():
        row = rows.setdefault(name, {"name": name, "jit_built": []})
        row.update(installed=bool(op.get("installed")), compatible=bool(op.get("compatible")))
        if op.get("why_not"):
            row["why_not"] = op["why_not"]
    unavailable.pop("compatible", None)
    unavailable.pop("ops", None)
    for row in rows.values():
        if row["name"] not in answered:  # built in a folder, but no op of this accelerator's builders
            row.update(compatible=None, why_not=f"not one of DeepSpeed's ops for {asked.get('accelerator')}")
    return {
        **section,
        "accelerator": asked.get("accelerator") or section.get("accelerator"),
        "accelerator_how": "asked: DeepSpeed's get_accelerator() picks it, with --full",
        "ops": list(rows.values()),
        "unavailable": unavailable,
    }

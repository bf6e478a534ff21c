"""The environment and hardware sections: package metadata, NVML (doctor/hardware/nvml.py), psutil. No torch import.

Kept fast on purpose (`ds-doctor env` is measured against `ds_report` in bench/): versions come
from installed package metadata and torch's own `version.py` is read as text.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from ds_doctor.hardware.nvml import read_gpus
from ds_doctor.hardware.records import read_node_records
from ds_doctor.hardware.skew import version_skew
from ds_doctor.hardware.system import wheel_version
from ds_doctor.redact import MASK, is_secret_name

PACKAGES = (
    "torch",
    "deepspeed",
    "accelerate",
    "transformers",
    "datasets",
    "numpy",
    "triton",
    "ninja",
    "nvidia-ml-py",
    "prodigyopt",
    "prodigy-plus-schedule-free",
    "mosaicml",
    "peft",
    "trl",
    "bitsandbytes",
    "flash-attn",
    "safetensors",
    "llamafactory",
    "ms-swift",
    "verl",
    "pydantic",
    "psutil",
    "ds-doctor",
)

ENV_PREFIXES = (
    "CUDA_",
    "NCCL_",
    "GLOO_",
    "TORCH_",
    "PYTORCH_",
    "DS_",
    "ACCELERATE_",
    "OMP_",
    "MKL_",
    "NVIDIA_",
    "TORCHELASTIC_",
)
ENV_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_PROCID",
    "SLURM_NNODES",
    "SLURM_NTASKS",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "TOKENIZERS_PARALLELISM",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def torch_build_field(field: str) -> str | None:
    """A field of torch/version.py (`cuda`, `hip`: what torch was built with), read as text: torch not imported."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        text = version_file.read_text()
    except OSError:
        return None
    match = re.search(rf"^{field}\s*(?::[^=\n]*)?=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return match.group(1) if match else None


def torch_cuda_version() -> str | None:
    """The CUDA torch was built with, read from torch/version.py without importing torch."""
    return torch_build_field("cuda")


def nccl_version() -> str | None:
    """NCCL as shipped in the nvidia-nccl-cu* wheel that CUDA builds of torch depend on."""
    return wheel_version("nvidia-nccl")


#: ds-doctor's own settings (DS_DOCTOR_STACKS, ...): about the tool, not the stack a ticket is about
OWN_PREFIX = "DS_DOCTOR_"


def relevant_variables(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Allowlisted variables only, ds-doctor's own left out; any whose name says secret is masked whatever its
    value."""
    environ = dict(os.environ if environ is None else environ)
    chosen = {
        k: v
        for k, v in environ.items()
        if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and not k.startswith(OWN_PREFIX)
    }
    return {k: (MASK if is_secret_name(k) else v) for k, v in sorted(chosen.items())}


def memory_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def collect_environment(*, dcgm: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """(env, hardware) sections of a report. On Linux the hardware section carries the node's fault records
    (ds_doctor.hardware.records: bounded reads of what exists; `dcgmi diag -r 1` only where dcgmi is on PATH and
    `dcgm` is true: it takes seconds)."""
    gpus, gpus_reason, drivers = read_gpus()
    packages = package_versions()
    env = {
        "python": platform.python_version(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "packages": packages,
        "version_skew": version_skew(packages),  # pairs out of each other's declared ranges
        "cuda": torch_cuda_version(),
        "nccl": nccl_version(),
        "driver": drivers["driver"],
        "cuda_driver": drivers["cuda_driver"],
        "variables": relevant_variables(),
    }
    hardware: dict[str, Any] = {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "memory_bytes": memory_bytes(),
        "gpus": gpus,
        "gpus_reason": gpus_reason,
    }
    if sys.platform.startswith("linux"):
        hardware["node_records"] = read_node_records(dcgm=dcgm)
    return env, hardware


def collect_details(
    env: dict[str, Any], hardware: dict[str, Any], *, child: subprocess.Popen[str] | None = None
) -> dict[str, Any]:
    """What `ds-doctor env` shows beyond a report's env and hardware sections (the facts `ds_report`,
    `python -m torch.utils.collect_env` and `accelerate env` show; docs/env.md): `system`, `deepspeed` and
    `accelerate_config`; and where `child` is the process `ds_doctor.hardware.runtime.start` started (`--full`),
    what an imported torch and DeepSpeed say (`runtime`), waited for once the rest is gathered."""
    from ds_doctor.hardware import runtime
    from ds_doctor.hardware.accelerate_default import collect_accelerate_config
    from ds_doctor.hardware.dsops import collect_deepspeed, merge_runtime
    from ds_doctor.hardware.system import collect_system

    torch = {
        "version": env["packages"].get("torch"),
        "cuda": env.get("cuda"),
        "hip": torch_build_field("hip"),
    }
    details: dict[str, Any] = {
        "system": collect_system(torch_version=torch["version"], torch_cuda=torch["cuda"]),
        "deepspeed": collect_deepspeed(torch=torch, gpus=len(hardware.get("gpus") or ())),
        "accelerate_config": collect_accelerate_config(),
    }
    if child is not None:
        asked = runtime.finish(child)
        details["runtime"] = asked
        details["deepspeed"] = merge_runtime(details["deepspeed"], asked.get("deepspeed", asked))
    return details

"""`ds-doctor env`'s sections beyond a report's env and hardware (ds_doctor.hardware.env.collect_details) as plain
lines, with DeepSpeed's op table as a Markdown table to paste into a ticket (docs/env.md says what each line
answers of `ds_report`, `collect_env` and `accelerate env`).

Reads the collected records only (JSON data). A fact that is absent is said in words, from the section's
`unavailable`, never as `None`; every line goes through `one_line`, so a value never starts a line of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ds_doctor.reports.safe import one_line

NOT_SAID = "unknown: not recorded"
#: DeepSpeed warns below this /dev/shm size (deepspeed/env_report.py get_shm_size): NCCL and its shm comm use it
SMALL_SHM_BYTES = 512 * 2**20


def fact(section: Mapping[str, Any], key: str) -> str:
    """A fact as text: its value, or in words why it has none."""
    value = section.get(key)
    if value is not None:
        return str(value)
    return str((section.get("unavailable") or {}).get(key) or NOT_SAID)


def size_text(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _cell(value: object) -> str:
    return one_line(value).replace("|", "\\|")


def system_lines(system: Mapping[str, Any]) -> list[str]:
    """The OS, CPU, /dev/shm, compilers, CUDA toolkit and wheels, ninja and libaio."""
    shm = system.get("shm_bytes")
    shm_text = fact(system, "shm_bytes") if shm is None else size_text(int(shm))
    if shm is not None and int(shm) < SMALL_SHM_BYTES:
        shm_text += " (small: DeepSpeed warns under 512 MiB; in docker, --shm-size=1g or more)"
    compilers = "  ".join(
        f"{name} {fact(system, name)}" for name in ("gcc", "g++", "clang", "cmake") if name in system
    )
    lines = [
        f"os: {fact(system, 'os')}  libc: {fact(system, 'libc')}",
        f"cpu: {fact(system, 'cpu_model')}",
        f"/dev/shm: {shm_text}",
        f"compilers: {compilers}",
    ]
    if "nvcc" in system:
        lines.append(f"nvcc: {fact(system, 'nvcc')} (CUDA_HOME {system.get('cuda_home') or 'none found'})")
    lines.append(
        f"cuda runtime (wheel): {fact(system, 'cuda_runtime')}  cudnn (wheel): {fact(system, 'cudnn')}"
    )
    lines.append(ninja_line(system))
    lines.append(f"libaio (DeepSpeed's async_io): {fact(system, 'libaio')}")
    return lines


def ninja_line(system: Mapping[str, Any]) -> str:
    """The ninja first on PATH (what DeepSpeed's JIT runs), and ds-doctor's where its ranks run another one."""
    line = f"ninja: {fact(system, 'ninja')}"
    if system.get("ninja_path"):
        line += f" ({system['ninja_path']}, first on PATH)"
    if system.get("ninja_ranks"):
        line += f"; ds-doctor's ranks run {system['ninja_ranks']} (beside this Python)"
    return line


def op_cell(row: Mapping[str, Any], unavailable: Mapping[str, str]) -> str:
    if row.get("compatible") is True:
        return "yes"
    if row.get("compatible") is False:
        return f"no: {row.get('why_not') or 'its builder says so'}"
    return str(row.get("why_not") or ("not checked" if "compatible" in unavailable else NOT_SAID))


def op_table(deepspeed: Mapping[str, Any]) -> list[str]:
    """DeepSpeed's ops as ds_report lists them, with where each is JIT-built; what a column could not tell below."""
    unavailable = deepspeed.get("unavailable") or {}
    rows = deepspeed.get("ops") or []
    if not rows:
        return [f"deepspeed ops: {unavailable.get('ops') or 'none listed'}"]
    lines = ["| op | installed (pre-compiled) | compatible | JIT-built in |", "| --- | --- | --- | --- |"]
    for row in rows:
        built = ", ".join(f"{label}'s folder" for label in row.get("jit_built") or ()) or "no"
        cells = (row.get("name"), "yes" if row.get("installed") else "no", op_cell(row, unavailable), built)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    lines += [f"{key}: {why}" for key, why in unavailable.items() if key in ("compatible", "ops")]
    return lines


def compiled_with(deepspeed: Mapping[str, Any]) -> str:
    """What the wheel's ops were compiled against (DeepSpeed writes torch 0.0 where none was), and its git commit."""
    torch, cuda = deepspeed.get("built_with_torch"), deepspeed.get("built_with_cuda")
    said = "no op pre-compiled" if torch in (None, "0.0") else f"ops pre-compiled against torch {torch}"
    if torch not in (None, "0.0") and cuda not in (None, "0.0"):
        said += f", CUDA {cuda}"
    return said + (f"; git {deepspeed['git']}" if deepspeed.get("git") else "")


def deepspeed_lines(deepspeed: Mapping[str, Any]) -> list[str]:
    lines = [f"torch install path: {fact(deepspeed, 'torch_install_path')}"]
    lines.append(f"deepspeed install path: {fact(deepspeed, 'install_path')}")
    if deepspeed.get("install_path") is None:
        return lines
    lines.append(
        f"deepspeed accelerator: {fact(deepspeed, 'accelerator')} ({deepspeed.get('accelerator_how')})"
    )
    lines.append(f"deepspeed build: accelerator {fact(deepspeed, 'built_for')}; {compiled_with(deepspeed)}")
    folders = deepspeed.get("jit_folders") or {}
    lines.append(
        "deepspeed JIT folders: "
        + "; ".join(f"{label}'s {folder or 'none here'}" for label, folder in folders.items())
    )
    return lines + op_table(deepspeed)


def runtime_lines(runtime: Mapping[str, Any]) -> list[str]:
    """What an imported torch said (--full)."""
    torch = runtime.get("torch", runtime)
    if "error" in torch:
        return [f"torch as imported (--full): {torch['error']}"]
    build = (
        f"CUDA {torch['cuda']}"
        if torch.get("cuda")
        else f"ROCm {torch['hip']}"
        if torch.get("hip")
        else "CPU"
    )
    return [
        f"torch as imported (--full): {torch.get('version')}, a {build} build; CUDA available: "
        f"{'yes' if torch.get('cuda_available') else 'no'}; cuDNN {torch.get('cudnn') or 'none loaded'}; "
        f"NCCL {torch.get('nccl') or 'none'}"
    ]


def accelerate_lines(config: Mapping[str, Any]) -> list[str]:
    """The default config's path, then its settings one a line (a nested section as `section.key`)."""
    if config.get("config") is None:
        return [f"accelerate default config: {config.get('path')}: {fact(config, 'config')}"]
    lines = [f"accelerate default config: {config.get('path')}"]
    for key, value in flattened(config["config"]):
        lines.append(f"  {key}: {value if isinstance(value, str) else json.dumps(value, default=str)}")
    return lines


def flattened(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            out += flattened(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


def details_lines(details: Mapping[str, Any]) -> list[str]:
    """Every section `collect_details` gathered, in the order a ticket reads them."""
    sections = (
        ("system", system_lines),
        ("runtime", runtime_lines),
        ("deepspeed", deepspeed_lines),
        ("accelerate_config", accelerate_lines),
    )
    lines = [line for key, render in sections if key in details for line in render(details[key])]
    return [one_line(line) for line in lines]

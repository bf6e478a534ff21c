"""`ds-doctor env`'s lines (reports/envreport.py, and the env and hardware lines of reports/console.py): an absent
fact is said in words, never `None`; the op table is a Markdown table whose cells never end early; data stays data."""

from __future__ import annotations

import re

from ds_doctor.reports.console import environment_lines
from ds_doctor.reports.envreport import details_lines

NONE = re.compile(r"\bNone\b")


def test_a_cpu_node_with_a_gpu_nvml_cannot_name_says_each_absence_in_words() -> None:
    env = {
        "python": "3.11.7",
        "platform": None,
        "packages": {"torch": "2.4.0+cpu", "deepspeed": None},
        "cuda": None,
        "nccl": None,
        "driver": None,
        "cuda_driver": None,
    }
    hardware = {
        "host": "node1",
        "cpus": None,
        "memory_bytes": None,
        "gpus": [{"index": 0, "name": None, "uuid": None, "unavailable": {"name": "NVMLError_NotSupported"}}],
    }
    lines = environment_lines(env, hardware)
    assert not NONE.search("\n".join(lines)), lines
    assert lines[0] == "host: node1  cpus: unknown  memory: unknown"
    assert lines[1] == "gpu 0: name unknown (NVMLError_NotSupported)"
    assert "cuda (torch build): none (a build without CUDA)  nccl: no NCCL wheel  driver: none found" in lines
    assert "deepspeed: not installed" in lines
    no_torch = environment_lines({**env, "packages": {"torch": None}}, {"host": "n", "gpus": []})
    assert any(line.startswith("cuda (torch build): torch not installed") for line in no_torch)
    assert "gpus: none" in no_torch


SYSTEM = {
    "os": "Debian GNU/Linux 12 (bookworm) (x86_64)",
    "libc": "glibc 2.36",
    "cpu_model": None,
    "gcc": None,
    "g++": "(Debian 12.2.0-14+deb12u1) 12.2.0",
    "ninja": "1.11.1",
    "ninja_path": "/usr/bin/ninja",
    "cuda_runtime": None,
    "cudnn": "9.1.0.70",
    "libaio": None,
    "shm_bytes": 64 * 2**20,
    "unavailable": {
        "cpu_model": "unknown: the platform does not say",
        "gcc": "not found on PATH",
        "cuda_runtime": "no nvidia-cuda-runtime wheel (torch may carry its own, or load the system's)",
        "libaio": "not installed (no libaio.so in the linker cache): apt install libaio-dev for async_io",
    },
}
DEEPSPEED = {
    "install_path": "/site/deepspeed",
    "torch_install_path": "/site/torch",
    "accelerator": "cuda",
    "accelerator_how": "asked: DeepSpeed's get_accelerator() picks it, with --full",
    "built_for": None,
    "built_with_torch": "2.4",
    "jit_folders": {"torch": "/c/torch_extensions/py311_cu121", "ds-doctor": None},
    "ops": [
        {"name": "cpu_adam", "installed": True, "compatible": True, "jit_built": []},
        {
            "name": "async_io",
            "installed": False,
            "compatible": False,
            "why_not": "a|b libaio",
            "jit_built": [],
        },
        {"name": "fused_adam", "installed": False, "compatible": None, "jit_built": ["torch"]},
    ],
    "unavailable": {"built_for": "unknown: the build file does not say"},
}


def test_every_section_reads_in_words() -> None:
    details = {
        "system": SYSTEM,
        "deepspeed": DEEPSPEED,
        "runtime": {"torch": {"version": "2.4.0", "cuda": "12.1", "cuda_available": False, "cudnn": None}},
        "accelerate_config": {
            "path": "/h/accelerate/default_config.yaml",
            "config": {"a": {"b": None}, "c": True},
        },
    }
    lines = details_lines(details)
    assert not NONE.search("\n".join(lines)), lines
    assert "cpu: unknown: the platform does not say" in lines
    assert "compilers: gcc not found on PATH  g++ (Debian 12.2.0-14+deb12u1) 12.2.0" in lines
    assert lines[2].startswith("/dev/shm: 64 MiB (small: DeepSpeed warns under 512 MiB")
    assert "cuda runtime (wheel): no nvidia-cuda-runtime wheel" in lines[4]
    assert (
        "torch as imported (--full): 2.4.0, a CUDA 12.1 build; CUDA available: no; cuDNN none loaded; NCCL none"
        in lines
    )
    built = "deepspeed build: accelerator unknown: the build file does not say; ops pre-compiled against torch 2.4"
    assert built in lines
    assert "| cpu_adam | yes | yes | no |" in lines
    assert "| async_io | no | no: a\\|b libaio | no |" in lines  # a pipe in data never ends the cell
    assert "| fused_adam | no | unknown: not recorded | torch's folder |" in lines
    assert "deepspeed JIT folders: torch's /c/torch_extensions/py311_cu121; ds-doctor's none here" in lines
    assert lines[-2:] == ["  a.b: null", "  c: true"]


def test_data_never_starts_a_line_or_sends_a_control() -> None:
    hostile = "x\n| forged | row |\x1b[31m"
    lines = details_lines(
        {
            "system": {**SYSTEM, "os": hostile},
            "accelerate_config": {"path": hostile, "config": {hostile: hostile}},
        }
    )
    assert all("\n" not in line and "\x1b" not in line for line in lines)
    assert not any(line.startswith("| forged") for line in lines)

"""`ds-doctor env`'s sections beyond a report's (ds_doctor.hardware.env.collect_details): the system facts, DeepSpeed's
op table as ds_report decides it, Accelerate's default config, and the child that asks an imported torch (`--full`),
each on real files, real tool outputs and real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ds_doctor.hardware import runtime
from ds_doctor.hardware.accelerate_default import collect_accelerate_config, default_config_path
from ds_doctor.hardware.dsops import (
    build_info,
    collect_deepspeed,
    merge_runtime,
    op_rows,
    predict_accelerator,
    torch_extensions_folder,
)
from ds_doctor.hardware.env import collect_details, collect_environment
from ds_doctor.hardware.system import collect_system, libaio, nvidia_wheels, tool_version
from ds_doctor.reports.envreport import details_lines
from tests.conftest import requires_deepspeed

#: deepspeed 0.19.8's git_version_info_installed.py, as pip wrote it here (a wheel with no op pre-compiled)
BUILD_FILE = """version='0.19.8'
git_hash='unknown'
git_branch='unknown'
installed_ops={'deepspeed_not_implemented': False, 'async_io': False, 'cpu_adam': True, 'fused_adam': False}
accelerator_name='cpu'
torch_info={'version': '2.4', 'bf16_support': False, 'cuda_version': '0.0', 'nccl_version': '0.0', 'hip_version': '0.0'}
"""
GCC = "gcc (Debian 12.2.0-14+deb12u1) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.\n"
NVCC = (
    "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\n"
    "Built on Wed_Aug_20_01:58:59_PM_PDT_2025\nCuda compilation tools, release 13.0, V13.0.88\n"
)
LDCONFIG = (
    "1234 libs found in cache `/etc/ld.so.cache'\n"
    "\tlibaio.so.1t64 (libc6,x86-64) => /lib/x86_64-linux-gnu/libaio.so.1t64\n"
    "\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n"
)


def test_tool_versions_are_read_from_their_real_outputs() -> None:
    assert tool_version("gcc", GCC) == "(Debian 12.2.0-14+deb12u1) 12.2.0"
    assert tool_version("nvcc", NVCC) == "13.0.88"
    assert tool_version("ninja", "1.11.1\n") == "1.11.1"
    assert tool_version("cmake", "cmake version 3.25.1\n\nCMake suite maintained by Kitware\n") == "3.25.1"
    assert tool_version("gcc", "unknown: gcc did not answer within 5 s").startswith("unknown: ")


def test_libaio_needs_the_library_and_its_header(tmp_path: Path, monkeypatch) -> None:
    header = tmp_path / "libaio.h"
    monkeypatch.setattr("ds_doctor.hardware.system.LIBAIO_HEADERS", (str(header),))
    assert libaio(LDCONFIG) == (
        None,
        (
            "library /lib/x86_64-linux-gnu/libaio.so.1t64 but no header (libaio.h): apt install libaio-dev for async_io"
        ),
    )
    header.write_text("/* libaio */\n")
    assert libaio(LDCONFIG) == (f"/lib/x86_64-linux-gnu/libaio.so.1t64 with {header}", None)
    assert libaio("1 libs found in cache\n")[1].startswith("not installed (no libaio.so in the linker cache)")
    assert libaio(None)[1].startswith("unknown: ")


def test_without_a_compiler_on_path_each_missing_tool_is_said(tmp_path: Path) -> None:
    """An empty PATH: gcc, g++ and ninja (what DeepSpeed's JIT needs) are said missing; clang and cmake left out."""
    system = collect_system({"PATH": str(tmp_path)}, torch_version="2.4.0", torch_cuda="12.1")
    for tool in ("gcc", "g++", "ninja"):
        assert system[tool] is None and system["unavailable"][tool] == "not found on PATH"
    assert "clang" not in system and "cmake" not in system
    assert system["os"] and system["unavailable"].keys() >= {"gcc", "g++", "ninja"}
    if not nvidia_wheels():  # a CUDA build of torch without the CUDA wheels: said so
        assert "no nvidia-cudnn wheel" in system["unavailable"]["cudnn"]
    cpu_build = collect_system({"PATH": str(tmp_path)}, torch_version="2.4.0+cpu", torch_cuda=None)
    assert "nvcc" not in cpu_build or cpu_build["nvcc"] is not None  # absent nvcc on a CPU build: no row
    assert cpu_build["unavailable"]["cuda_runtime"] == "none: torch is a CPU build"


def test_the_build_file_is_parsed_not_run(tmp_path: Path) -> None:
    (tmp_path / "git_version_info_installed.py").write_text(BUILD_FILE + "raise SystemExit('imported')\n")
    info, reason = build_info(str(tmp_path))
    assert reason is None and info["accelerator_name"] == "cpu" and info["installed_ops"]["cpu_adam"] is True
    assert build_info(str(tmp_path / "absent"))[1].startswith("git_version_info_installed.py not read")


def test_op_rows_say_installed_only_for_the_accelerator_built_for_and_where_each_is_jit_built(
    tmp_path: Path,
) -> None:
    (tmp_path / "git_version_info_installed.py").write_text(BUILD_FILE)
    info, _ = build_info(str(tmp_path))
    torch_folder, ours = tmp_path / "torch_ext", tmp_path / "ours"
    for folder, op in ((torch_folder, "fused_adam"), (ours, "fused_adam"), (ours, "deepspeed_shm_comm")):
        (folder / op).mkdir(parents=True)
        (folder / op / f"{op}.so").write_bytes(b"\x7fELF")
    (torch_folder / "async_io").mkdir()  # a build that did not finish: no .so
    folders = {"torch": str(torch_folder), "ds-doctor": str(ours)}
    rows = {row["name"]: row for row in op_rows(info, "cpu", folders)}
    assert rows["cpu_adam"]["installed"] is True and rows["fused_adam"]["installed"] is False
    assert rows["fused_adam"]["jit_built"] == ["torch", "ds-doctor"] and rows["async_io"]["jit_built"] == []
    assert rows["deepspeed_shm_comm"]["jit_built"] == [
        "ds-doctor"
    ]  # built, though the build file lists it not
    assert all(row["compatible"] is None for row in rows.values())
    on_cuda = {row["name"]: row for row in op_rows(info, "cuda", folders)}
    assert on_cuda["cpu_adam"]["installed"] is False  # ds_report: installed only on the accelerator built for


def test_torch_extensions_folder_follows_torchs_rule(tmp_path: Path) -> None:
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    py = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    base = os.path.realpath(tmp_path / "torch_extensions")
    assert torch_extensions_folder(environ, None, None) == os.path.join(base, f"{py}_cpu")
    assert torch_extensions_folder(environ, "12.1", None) == os.path.join(base, f"{py}_cu121")
    assert torch_extensions_folder(environ, None, "6.2") == os.path.join(base, f"{py}_rocm62")
    assert torch_extensions_folder({"TORCH_EXTENSIONS_DIR": "/x"}, "12.1", None) == "/x"


def test_the_accelerator_is_predicted_as_get_accelerator_would_pick_it() -> None:
    assert predict_accelerator({"DS_ACCELERATOR": "cpu"}, torch_cuda="12.1", gpus=8)[0] == "cpu"
    assert predict_accelerator({}, torch_cuda="12.1", gpus=2)[0] == "cuda"
    name, how = predict_accelerator({}, torch_cuda="12.1", gpus=0)
    assert name == "cpu" and "no GPU NVML sees" in how
    assert predict_accelerator({}, torch_cuda=None, gpus=2)[1].startswith("predicted: torch is a CPU build")


def test_what_deepspeed_said_fills_the_compatible_column_and_a_failed_ask_says_why() -> None:
    section = {
        "install_path": "/ds",
        "accelerator": "cpu",
        "ops": [
            {"name": "async_io", "installed": False, "compatible": None, "jit_built": []},
            {"name": "stale_op", "installed": False, "compatible": None, "jit_built": ["torch"]},
        ],
        "unavailable": {"compatible": "not checked"},
    }
    asked = {
        "accelerator": "cpu",
        "ops": [
            {"name": "async_io", "installed": False, "compatible": False, "why_not": "libaio not found"},
            {"name": "cpu_adam", "installed": False, "compatible": True},
        ],
    }
    merged = merge_runtime(section, asked)
    rows = {row["name"]: row for row in merged["ops"]}
    assert rows["async_io"]["compatible"] is False and rows["async_io"]["why_not"] == "libaio not found"
    assert rows["cpu_adam"]["compatible"] is True and "compatible" not in merged["unavailable"]
    assert (
        rows["stale_op"]["compatible"] is None and "not one of DeepSpeed's ops" in rows["stale_op"]["why_not"]
    )
    failed = merge_runtime(section, {"error": "unknown: torch and DeepSpeed did not answer within 60 s"})
    assert failed["unavailable"]["compatible"].startswith("unknown: ") and failed["ops"] == section["ops"]
    lines = details_lines({"deepspeed": failed})
    assert "| async_io | no | not checked | no |" in lines
    assert "compatible: unknown: torch and DeepSpeed did not answer within 60 s" in lines


def test_the_accelerate_default_config_is_found_where_accelerate_looks(tmp_path: Path) -> None:
    assert default_config_path({"HF_HOME": str(tmp_path)}) == tmp_path / "accelerate" / "default_config.yaml"
    assert default_config_path({"XDG_CACHE_HOME": str(tmp_path)}) == (
        tmp_path / "huggingface" / "accelerate" / "default_config.yaml"
    )
    absent = collect_accelerate_config({"HF_HOME": str(tmp_path)})
    assert absent["found"] is False and absent["unavailable"]["config"].startswith("none: ")
    (tmp_path / "accelerate").mkdir()
    (tmp_path / "accelerate" / "default_config.yaml").write_text("distributed_type: [unclosed\n")
    broken = collect_accelerate_config({"HF_HOME": str(tmp_path)})
    assert broken["config"] is None and broken["unavailable"]["config"].startswith("unknown: ")
    assert "not YAML" in broken["unavailable"]["config"]


def test_the_child_that_imports_torch_is_bounded_and_its_failure_is_one_line() -> None:
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    said = runtime.finish(sleeper, timeout_s=0.5)
    assert said == {"error": "unknown: torch and DeepSpeed did not answer within 0.5 s"}
    assert sleeper.poll() is not None
    crashed = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; print('noise'); sys.exit('ImportError: libcudart.so.12: cannot open')",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said = runtime.finish(crashed)
    assert said["error"] == (
        "unknown: the child that imports torch exited 1: ImportError: libcudart.so.12: cannot open"
    )


def test_first_said_drops_colours_and_the_warning_tag() -> None:
    printed = "\x1b[93m [WARNING] \x1b[0m async_io requires the dev libaio .so object and headers\nmore\n"
    assert runtime.first_said(printed) == "async_io requires the dev libaio .so object and headers"


def test_every_section_is_gathered_without_importing_torch() -> None:
    code = (
        "import sys, json; from ds_doctor.hardware.env import collect_details, collect_environment\n"
        "env, hw = collect_environment(dcgm=False); d = collect_details(env, hw)\n"
        "assert 'torch' not in sys.modules and 'deepspeed' not in sys.modules, 'heavy import'\n"
        "print(json.dumps(sorted(d)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert json.loads(out) == ["accelerate_config", "deepspeed", "system"]


@requires_deepspeed
def test_full_asks_the_real_deepspeed_for_each_op() -> None:
    """The real child (seconds): every op of this accelerator gets a compatibility, as ds_report's column."""
    child = runtime.start()
    env, hardware = collect_environment(dcgm=False)
    details = collect_details(env, hardware, child=child)
    assert details["runtime"]["torch"]["version"] == env["packages"]["torch"]
    ops = details["deepspeed"]["ops"]
    assert ops and all(
        isinstance(op["compatible"], bool) for op in ops if "not one of" not in op.get("why_not", "")
    )
    assert details["deepspeed"]["accelerator_how"].startswith("asked: ")
    assert "None" not in "\n".join(details_lines(details))


@pytest.mark.parametrize("deepspeed_installed", [True, False])
def test_an_absent_deepspeed_is_said_not_shown_as_none(monkeypatch, deepspeed_installed: bool) -> None:
    if not deepspeed_installed:
        monkeypatch.setattr("ds_doctor.hardware.dsops.package_dir", lambda name: None)
    section = collect_deepspeed(torch={"version": None, "cuda": None, "hip": None}, gpus=0)
    lines = details_lines({"deepspeed": section})
    assert "None" not in "\n".join(lines)
    if not deepspeed_installed:
        assert lines == ["torch install path: not installed", "deepspeed install path: not installed"]

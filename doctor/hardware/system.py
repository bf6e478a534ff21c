"""The node's system facts a ticket is asked for (`ds-doctor env`'s `system` section): the OS and libc, the CPU
model, the compilers DeepSpeed's JIT builds with, nvcc, ninja, libaio, /dev/shm, and the CUDA runtime and cuDNN
wheels torch loads.

What `python -m torch.utils.collect_env` and DeepSpeed's `ds_report` show, found without importing torch or
DeepSpeed: files are read, versions come from package metadata, and the tools (`gcc --version`, `nvcc -V`,
`ninja --version`, `ldconfig -p`) run at once, each bounded by TOOL_TIMEOUT_S. A fact not found is None with its
reason in `unavailable`, in words ("not found on PATH"), as the GPU readings do; a row whose absence is the normal
case (clang, cmake) is left out instead.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TOOL_TIMEOUT_S = 5.0
#: libaio's header where DeepSpeed's async_io looks first (it also tries CFLAGS' -I folders)
LIBAIO_HEADERS = ("/usr/include/libaio.h", "/usr/local/include/libaio.h")


def os_name(release_file: Path = Path("/etc/os-release")) -> str:
    """The distribution and machine, as collect_env says it (`Debian GNU/Linux 12 (bookworm) (x86_64)`)."""
    if sys.platform == "darwin":
        return f"macOS {platform.mac_ver()[0]} ({platform.machine()})"
    with contextlib.suppress(OSError):
        match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', release_file.read_text(errors="replace"), re.M)
        if match:
            return f"{match.group(1)} ({platform.machine()})"
    return f"{platform.system()} {platform.release()} ({platform.machine()})"


def libc() -> str | None:
    name, version = platform.libc_ver()
    return f"{name} {version}" if name else None


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The first `model name` of /proc/cpuinfo (lscpu's `Model name`), or the platform's processor string."""
    with contextlib.suppress(OSError):
        match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(errors="replace"), re.M)
        if match:
            return match.group(1).strip()
    return platform.processor() or None


def shm_bytes() -> tuple[int | None, str | None]:
    """/dev/shm's size, or why it has none."""
    try:
        stats = os.statvfs("/dev/shm")
    except (OSError, AttributeError) as exc:
        return None, f"unknown: {type(exc).__name__}: {exc}"
    return stats.f_frsize * stats.f_blocks, None


_DIST_INFO = re.compile(r"(nvidia[-_.][\w.]*?)-([^-]+)\.dist-info", re.I)


@functools.lru_cache(maxsize=1)
def nvidia_wheels() -> tuple[tuple[str, str], ...]:
    """(name, version) of each installed `nvidia-*` wheel, from the names of the `.dist-info` folders on sys.path
    (a few directory listings: parsing every distribution's METADATA takes ~70 ms on 170 of them)."""
    found: list[tuple[str, str]] = []
    for folder in dict.fromkeys(sys.path):
        with contextlib.suppress(OSError):
            for entry in os.listdir(folder or "."):
                match = _DIST_INFO.fullmatch(entry)
                if match:
                    found.append((re.sub(r"[-_.]+", "-", match.group(1)).lower(), match.group(2)))
    return tuple(found)


def wheel_version(prefix: str) -> str | None:
    """The version of the first installed NVIDIA distribution whose name starts with `prefix` (`nvidia-cudnn`
    matches nvidia-cudnn-cu12 and nvidia-cudnn-cu13)."""
    return next((version for name, version in nvidia_wheels() if name.startswith(prefix)), None)


def cuda_home(environ: Mapping[str, str]) -> str | None:
    """The CUDA toolkit torch's extension builder uses (torch.utils.cpp_extension._find_cuda_home): CUDA_HOME or
    CUDA_PATH, else the folder above the `nvcc` on PATH, else /usr/local/cuda where it exists."""
    given = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    if given:
        return given
    nvcc = shutil.which("nvcc", path=environ.get("PATH"))
    if nvcc is not None:
        return os.path.dirname(os.path.dirname(nvcc))
    return "/usr/local/cuda" if os.path.isdir("/usr/local/cuda") else None


def tool_commands(environ: Mapping[str, str]) -> dict[str, list[str]]:
    """The version commands to run, each only where its program is found: a missing one is said, not run."""
    path = environ.get("PATH")
    commands: dict[str, list[str]] = {}
    for name in ("gcc", "g++", "clang", "cmake", "ninja"):
        found = shutil.which(name, path=path)
        if found is not None:
            commands[name] = [found, "--version"]
    ours = os.path.join(os.path.dirname(sys.executable), "ninja")
    if os.access(ours, os.X_OK) and os.path.realpath(ours) != os.path.realpath(
        commands.get("ninja", [""])[0]
    ):
        commands["ninja_ranks"] = [ours, "--version"]  # what ds-doctor's ranks run: this folder first
    home = cuda_home(environ)
    if home is not None and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
        commands["nvcc"] = [os.path.join(home, "bin", "nvcc"), "-V"]
    ldconfig = shutil.which("ldconfig", path=f"{path or ''}{os.pathsep}/sbin{os.pathsep}/usr/sbin")
    if ldconfig is not None and sys.platform.startswith("linux"):
        commands["ldconfig"] = [ldconfig, "-p"]
    return commands


def run_tools(commands: Mapping[str, list[str]], timeout_s: float = TOOL_TIMEOUT_S) -> dict[str, str]:
    """Each command's output (stdout, else stderr), all started at once; a failure is `unknown: <why>` instead."""
    started: dict[str, subprocess.Popen[str] | str] = {}
    for name, argv in commands.items():
        try:
            started[name] = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
            )
        except OSError as exc:
            started[name] = f"unknown: {argv[0]} did not start: {exc.strerror or exc}"
    said: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s  # one bound for them all: they run at once
    for name, proc in started.items():
        if isinstance(proc, str):
            said[name] = proc
            continue
        try:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            said[name] = f"unknown: {commands[name][0]} did not answer within {timeout_s:g} s"
            continue
        said[name] = out if proc.returncode == 0 and out.strip() else f"unknown: {first_line(err or out)}"
    return said


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "(no output)")


_VERSION_OF = {
    # gcc's whole first line but the program's name (it names the distribution's build); a gcc that is clang's
    # (macOS) keeps its own first line
    "gcc": re.compile(r"\A(?:\S*gcc\S* )?(.+)$", re.M),
    "g++": re.compile(r"\A(?:\S*g\+\+\S* )?(.+)$", re.M),
    "clang": re.compile(r"clang version (\S+)"),
    "cmake": re.compile(r"cmake version (\S+)"),
    "nvcc": re.compile(r"release \S+ V(\S+)"),
    "ninja": re.compile(r"^(\d[\w.]*)", re.M),
    "ninja_ranks": re.compile(r"^(\d[\w.]*)", re.M),
}


def tool_version(name: str, output: str | None) -> str | None:
    """The version in a tool's output (gcc's whole first line: it names the distribution's build)."""
    if output is None or output.startswith("unknown: "):
        return output
    match = _VERSION_OF[name].search(output)
    return match.group(1).strip() if match else f"unknown: {first_line(output)[:120]}"


def libaio(ldconfig_output: str | None) -> tuple[str | None, str | None]:
    """libaio as DeepSpeed's async_io needs it: the shared library and its header (libaio-dev installs both)."""
    libraries = re.findall(r"libaio\.so\S*\s.*=>\s*(\S+)", ldconfig_output or "")
    header = next((h for h in LIBAIO_HEADERS if os.path.exists(h)), None)
    if libraries and header:
        return f"{libraries[0]} with {header}", None
    if libraries:
        return None, f"library {libraries[0]} but no header (libaio.h): apt install libaio-dev for async_io"
    if ldconfig_output is None or ldconfig_output.startswith("unknown: "):
        return None, f"unknown: the linker cache was not read ({ldconfig_output or 'no ldconfig'})"
    return None, "not installed (no libaio.so in the linker cache): apt install libaio-dev for async_io"


def tool_facts(
    said: Mapping[str, str], torch_cuda: str | None
) -> tuple[dict[str, str | None], dict[str, str]]:
    """Each tool's version; gcc, g++ and ninja (what DeepSpeed's JIT needs) and nvcc for a CUDA build of torch are
    said where missing, the rest (clang, cmake, nvcc on a CPU build) left out."""
    found: dict[str, str | None] = {}
    unavailable: dict[str, str] = {}
    for name in _VERSION_OF:
        version = tool_version(name, said.get(name))
        if version is not None and not version.startswith("unknown: "):
            found[name] = version
        elif version is not None or name in ("gcc", "g++", "ninja") or (name == "nvcc" and torch_cuda):
            found[name] = None
            unavailable[name] = version or "not found on PATH"
    return found, unavailable


def cuda_wheels(
    torch_version: str | None, torch_cuda: str | None
) -> tuple[dict[str, str | None], dict[str, str]]:
    """The CUDA runtime and cuDNN wheels a CUDA build of torch loads (the versions torch itself reports)."""
    found: dict[str, str | None] = {}
    unavailable: dict[str, str] = {}
    for key, prefix in (("cuda_runtime", "nvidia-cuda-runtime"), ("cudnn", "nvidia-cudnn")):
        found[key] = wheel_version(prefix)
        if found[key] is not None:
            continue
        if torch_version is None:
            unavailable[key] = "none: torch is not installed"
        elif torch_cuda is None:
            unavailable[key] = "none: torch is a CPU build"
        else:
            unavailable[key] = f"no {prefix} wheel (torch may carry its own, or load the system's)"
    return found, unavailable


def collect_system(
    environ: Mapping[str, str] | None = None,
    *,
    torch_version: str | None = None,
    torch_cuda: str | None = None,
) -> dict[str, Any]:
    """The `system` section: every fact, None with its reason under `unavailable` where it was not found.
    `torch_version` and `torch_cuda` (None: not installed, a CPU build) say which CUDA facts are expected."""
    environ = dict(os.environ if environ is None else environ)
    said = run_tools(tool_commands(environ))
    out: dict[str, Any] = {"os": os_name(), "libc": libc(), "cpu_model": cpu_model()}
    unavailable = {
        key: "unknown: the platform does not say" for key in ("libc", "cpu_model") if out[key] is None
    }
    tools, missing = tool_facts(said, torch_cuda)
    wheels, no_wheels = cuda_wheels(torch_version, torch_cuda)
    out.update(tools, **wheels)
    unavailable.update(missing, **no_wheels)
    out["ninja_path"] = shutil.which("ninja", path=environ.get("PATH"))
    out["cuda_home"] = cuda_home(environ)
    if out["cuda_home"] is None:
        unavailable["cuda_home"] = (
            "none found (CUDA_HOME and CUDA_PATH unset, no nvcc on PATH, no /usr/local/cuda)"
        )
    out["libaio"], reason = libaio(said.get("ldconfig"))
    out["shm_bytes"], shm_reason = shm_bytes()
    unavailable.update({k: v for k, v in (("libaio", reason), ("shm_bytes", shm_reason)) if v})
    out["unavailable"] = unavailable
    return out

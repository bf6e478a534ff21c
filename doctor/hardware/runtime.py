"""What only an imported torch and DeepSpeed can say, asked in a child process (`ds-doctor env --full`).

`ds-doctor env` never imports torch or DeepSpeed itself (seconds, and a broken CUDA install can hang or crash the
import). `--full` starts `python -m ds_doctor.hardware.runtime`, which imports them and prints one JSON line: torch's
CUDA, cuDNN and NCCL as loaded and whether CUDA is available; DeepSpeed's accelerator as get_accelerator() picks
it, and per op of its builders `is_compatible()` and `installed` as `ds_report` decides them (with the first warning
the builder printed where an op is not compatible). The parent waits RUNTIME_TIMEOUT_S; a child that times out or
fails leaves those facts `unknown: <one-line reason>`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import signal
import subprocess
import sys
from typing import Any

RUNTIME_TIMEOUT_S = 60.0
MARK = "ds-doctor-runtime: "
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_said(text: str) -> str | None:
    """The first line a builder printed, its colour codes and `[WARNING]` tag dropped."""
    for line in _ANSI.sub("", text).splitlines():
        line = line.replace("[WARNING]", "").strip()
        if line:
            return line[:300]
    return None


def torch_facts() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cuda_available": torch.cuda.is_available(),
        "cudnn": None,
        "nccl": None,
    }
    with contextlib.suppress(Exception):
        facts["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    with contextlib.suppress(Exception):
        if torch.cuda.is_available() or torch.version.cuda:
            facts["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    return facts


def op_answer(name: str, builder: Any, installed: bool) -> dict[str, Any]:
    """One op as ds_report decides it; what the builder prints while it checks is kept for the reason."""
    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        try:
            compatible = bool(builder.is_compatible(verbose=True))
        except (
            Exception
        ) as exc:  # DeepSpeed's own probe_is_compatible treats a raising check as not compatible
            compatible = False
            print(f"the compatibility check raised {type(exc).__name__}: {exc}")
    answer: dict[str, Any] = {"name": name, "installed": installed, "compatible": compatible}
    if not compatible:
        answer["why_not"] = first_said(said.getvalue()) or "its builder says so, without a reason"
    return answer


def deepspeed_facts() -> dict[str, Any]:
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import accelerator_name, installed_ops
    from deepspeed.ops.op_builder.all_ops import ALL_OPS

    accelerator = get_accelerator()._name
    ops = [
        op_answer(name, builder, bool(installed_ops.get(name)) and accelerator_name == accelerator)
        for name, builder in ALL_OPS.items()
    ]
    return {"accelerator": accelerator, "ops": ops}


def answer() -> dict[str, Any]:
    """Everything the child says; what torch and DeepSpeed print while imported is not part of it."""
    out: dict[str, Any] = {}
    noise = io.StringIO()
    for key, facts in (("torch", torch_facts), ("deepspeed", deepspeed_facts)):
        if importlib.util.find_spec(key) is None:
            out[key] = {"error": "not installed"}
            continue
        try:
            with contextlib.redirect_stdout(noise):
                out[key] = facts()
        except Exception as exc:
            out[key] = {"error": f"unknown: {key} did not answer: {type(exc).__name__}: {str(exc)[:300]}"}
    return out


def start() -> subprocess.Popen[str]:
    """The child, started now (the parent gathers the fast facts meanwhile), in a session of its own so that a
    timeout ends every compiler it started too."""
    from ds_doctor.procs import module_command

    return subprocess.Popen(
        module_command("ds_doctor.hardware.runtime"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def finish(proc: subprocess.Popen[str], timeout_s: float = RUNTIME_TIMEOUT_S) -> dict[str, Any]:
    """The child's answer, or `{"error": "unknown: <why>"}` where it timed out, failed or said nothing."""
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"error": f"unknown: torch and DeepSpeed did not answer within {timeout_s:g} s"}
    for line in reversed(out.splitlines()):
        if line.startswith(MARK):
            with contextlib.suppress(ValueError):
                answered = json.loads(line[len(MARK) :])
                if isinstance(answered, dict):
                    return answered
    last = [line.strip() for line in (err or out).splitlines() if line.strip()][-1:] or ["no output"]
    return {"error": f"unknown: the child that imports torch exited {proc.returncode}: {last[0][:300]}"}


if __name__ == "__main__":
    said = answer()
    sys.stdout.write(MARK + json.dumps(said, default=str) + "\n")

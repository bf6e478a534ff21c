"""One op cache with the user's jobs: the folder torch's JIT uses by default, unless another environment's builds
are there; keyed so that a build for another Python, torch or DeepSpeed is never loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ds_doctor.ops import cache
from tests.conftest import requires_deepspeed

NINJA = """cflags = -DTORCH_EXTENSION_NAME=cpu_adam -I{ds}/ops/csrc/includes -isystem {torch}/include \
-isystem {torch}/include/torch/csrc/api/include -isystem /usr/include/python3.11 -fPIC -O3
build cpu_adam.o: compile {ds}/ops/csrc/adam/cpu_adam.cpp
build cpu_adam_impl.o: compile {ds}/ops/csrc/adam/cpu_adam_impl.cpp
build cpu_adam.so: link cpu_adam.o cpu_adam_impl.o
"""


def installs() -> tuple[Path, Path]:
    import importlib.util

    torch, deepspeed = (importlib.util.find_spec(name) for name in ("torch", "deepspeed"))
    assert torch is not None and torch.origin and deepspeed is not None and deepspeed.origin
    return Path(torch.origin).parent, Path(deepspeed.origin).parent


@requires_deepspeed
def test_a_build_of_this_environment_is_its_own_and_another_ones_is_named() -> None:
    torch, ds = installs()
    assert cache.foreign_builder(NINJA.format(torch=torch, ds=ds), torch, ds) is None
    other_torch = NINJA.format(torch="/opt/other-venv/lib/python3.11/site-packages/torch", ds=ds)
    assert (
        cache.foreign_builder(other_torch, torch, ds) == "/opt/other-venv/lib/python3.11/site-packages/torch"
    )
    other_ds = NINJA.format(torch=torch, ds="/opt/other-venv/lib/python3.11/site-packages/deepspeed")
    assert cache.foreign_builder(other_ds, torch, ds) == (
        "/opt/other-venv/lib/python3.11/site-packages/deepspeed/ops/csrc/adam/cpu_adam.cpp"
    )


@requires_deepspeed
def test_torchs_default_folder_unless_another_environment_built_there(tmp_path: Path) -> None:
    """Empty or holding this environment's builds: torch's default folder, which the user's jobs use too. Holding
    another environment's: ds-doctor's own, keyed, and the line says how a job shares it."""
    code = (
        "import json, os, sys; from ds_doctor.ops import cache; "
        "root, why = cache.choose_root(os.environ, ['cpu_adam']); print(json.dumps([str(root), why]))"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("TORCH_EXTENSIONS_DIR", None)

    def choose() -> tuple[str, str]:
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-2000:]
        root, why = json.loads(out.stdout.splitlines()[-1])
        return root, why

    root, why = choose()
    assert root == str(cache.likely_root(env)) and root.startswith(str(tmp_path / "torch_extensions"))
    assert "your jobs in this environment build and load the same ops there" in why
    torch, ds = installs()
    (Path(root) / "cpu_adam").mkdir(parents=True)
    (Path(root) / "cpu_adam" / "build.ninja").write_text(NINJA.format(torch=torch, ds=ds))
    assert choose()[0] == root  # this environment's own build: shared
    (Path(root) / "cpu_adam" / "build.ninja").write_text(NINJA.format(torch="/opt/old/torch", ds=ds))
    private, why = choose()
    assert private == str(tmp_path / "ds-doctor" / "torch_extensions" / cache.build_key())
    assert "another environment's builds" in why and f"TORCH_EXTENSIONS_DIR={private}" in why
    # the user's choice is theirs
    assert cache.choose_root({"TORCH_EXTENSIONS_DIR": "/scratch/ext"}, ["cpu_adam"])[0] == Path(
        "/scratch/ext"
    )


def test_another_interpreter_gets_another_key(tmp_path: Path) -> None:
    """A second environment (the same files under another interpreter path, as a second venv is) never shares
    ds-doctor's own folder."""
    other = tmp_path / "venv" / "bin"
    other.mkdir(parents=True)
    (other / "python").write_bytes(b"")
    code = "from ds_doctor.ops.cache import build_key; print(build_key())"
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert here.strip() == cache.build_key()
    patched = f"import sys; sys.executable = {str(other / 'python')!r}; " + code
    elsewhere = subprocess.run(
        [sys.executable, "-c", patched], capture_output=True, text=True, check=True
    ).stdout
    assert elsewhere.strip() != cache.build_key()
    assert elsewhere.split("-")[:3] == cache.build_key().split("-")[:3]


def test_a_stamp_holds_only_while_every_op_is_as_the_phase_left_it(tmp_path: Path) -> None:
    for op in ("cpu_adam", "fused_adam"):
        (tmp_path / op).mkdir()
        (tmp_path / op / f"{op}.so").write_bytes(b"\x7fELF")
    assert not cache.stamped(tmp_path) and not cache.stamped(None)
    cache.write_stamp(tmp_path, ["cpu_adam", "fused_adam"])
    assert cache.stamped(tmp_path)
    (tmp_path / "cpu_adam" / "lock").write_bytes(b"")  # a build under way, or one killed: the phase looks
    assert not cache.stamped(tmp_path)
    (tmp_path / "cpu_adam" / "lock").unlink()
    os.utime(
        tmp_path / "fused_adam" / "fused_adam.so", ns=(1, 1)
    )  # rebuilt since (a job of another flag set)
    assert not cache.stamped(tmp_path)


@pytest.mark.multirank
@requires_deepspeed
def test_the_users_own_job_loads_the_ops_the_doctor_built(tmp_path: Path) -> None:
    """A user's DeepSpeed job in this environment, started as they would (no TORCH_EXTENSIONS_DIR unless the doctor's
    line told them to set one), loads the ops make's set-up built through `python -m ds_doctor.ops`: no rebuild."""
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}  # as a user's shell has it
    built = subprocess.run(
        [sys.executable, "-m", "ds_doctor.ops"], capture_output=True, text=True, timeout=3600, env=env
    )
    assert built.returncode == 0, built.stdout[-2000:]
    root = Path(built.stdout.strip().splitlines()[-1].rsplit(" in ", 1)[1])
    if "TORCH_EXTENSIONS_DIR=" in built.stdout:  # torch's default folder holds another environment's builds
        env["TORCH_EXTENSIONS_DIR"] = str(root)
    library = root / "cpu_adam" / "cpu_adam.so"
    before = library.stat().st_mtime_ns
    job = (
        "import torch; from deepspeed.ops.adam import DeepSpeedCPUAdam; "
        "p = torch.nn.Parameter(torch.ones(4)); opt = DeepSpeedCPUAdam([p]); p.grad = torch.ones(4); opt.step(); "
        "print('stepped', float(p[0]))"
    )
    out = subprocess.run(
        [str(Path(sys.executable).parent / "python"), "-c", job],
        env={**env, "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])},
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0 and "stepped" in out.stdout, out.stderr[-3000:]
    assert library.stat().st_mtime_ns == before  # loaded, not built again
    assert "Building extension module" not in out.stdout + out.stderr

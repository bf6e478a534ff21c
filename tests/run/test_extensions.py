"""The ranks' own extensions folder (another environment's DeepSpeed cannot rebuild an op under them) and the line
a first run says while it builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ds_doctor.probe.rankoptions import RankOptions
from ds_doctor.run.command import rank_environment
from ds_doctor.run.extensions import build_key, first_build_line, private_extensions_dir
from tests.test_e2e import ds_doctor


def test_the_folder_is_the_doctors_own_keyed_by_interpreter_torch_and_deepspeed(tmp_path: Path) -> None:
    folder = private_extensions_dir({"XDG_CACHE_HOME": str(tmp_path)})
    assert folder == str(tmp_path / "ds-doctor" / "torch_extensions" / build_key())
    key = build_key()
    assert key.startswith(f"py{sys.version_info.major}{sys.version_info.minor}-torch") and "-ds0." in key
    # the user's own choice is theirs
    assert private_extensions_dir({"TORCH_EXTENSIONS_DIR": "/scratch/ext"}) is None
    # and the ranks build where the options say
    env = rank_environment(RankOptions(extensions_dir=folder), None, False, None)
    assert env["TORCH_EXTENSIONS_DIR"] == folder


def test_another_interpreter_gets_another_folder(tmp_path: Path) -> None:
    """A second environment (here: the same files under another interpreter path, as a second venv is) never shares
    the folder, so its DeepSpeed cannot rebuild an op this one loads."""
    other = tmp_path / "venv" / "bin"
    other.mkdir(parents=True)
    (other / "python").write_bytes(b"")  # a distinct interpreter path
    code = "from ds_doctor.run.extensions import build_key; print(build_key())"
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert here.strip() == build_key()
    patched = f"import sys; sys.executable = {str(other / 'python')!r}; " + code
    elsewhere = subprocess.run(
        [sys.executable, "-c", patched], capture_output=True, text=True, check=True
    ).stdout
    assert elsewhere.strip() != build_key() and elsewhere.split("-")[:3] == build_key().split("-")[:3]


def test_a_first_run_says_it_builds_and_a_later_one_does_not(tmp_path: Path) -> None:
    line = first_build_line(str(tmp_path))
    assert line is not None and str(tmp_path) in line and "once" in line and "cpu_adam" in line
    (tmp_path / "cpu_adam").mkdir()
    (tmp_path / "cpu_adam" / "cpu_adam.so").write_bytes(b"\x7fELF")
    assert first_build_line(str(tmp_path)) is None
    assert first_build_line(None) is None


def test_a_cold_run_off_a_terminal_says_where_it_builds(tmp_path: Path) -> None:
    """A real run with an empty cache folder: the plain line is printed before the first case (the build itself
    is the launch's; a case that needs no op builds none, so this one stays fast)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("TORCH_EXTENSIONS_DIR", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ds_doctor.cli",
            "run",
            "-k",
            "comm and all_reduce-ws1",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.splitlines() + proc.stdout.splitlines()
    (said,) = [line for line in lines if "are not built in" in line]
    assert str(tmp_path / "cache" / "ds-doctor" / "torch_extensions") in said
    options = json.loads(next(tmp_path.glob("run-*/ws1-*/options.json")).read_text())
    assert options["extensions_dir"].startswith(str(tmp_path / "cache" / "ds-doctor" / "torch_extensions"))


def test_the_ranks_find_this_interpreters_ninja_first(tmp_path: Path) -> None:
    """torch's JIT runs `ninja` from PATH; another ninja (the system's 1.11 against the venv's 1.13) records builds
    differently, and every op was rebuilt (100-225 s) when the venv's ds-doctor ran without the venv activated."""
    env = rank_environment(RankOptions(), None, False, None)
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)


def test_a_run_with_another_ninja_first_on_path_rebuilds_nothing(tmp_path: Path) -> None:
    """For real: a `ninja` first on PATH that records it ran and fails; a DeepSpeed case (ZeRO-3 offload with CPU Adam:
    cpu_adam and the shm op load) passes, that ninja never runs, and no rebuild is said."""
    fake = tmp_path / "bin"
    fake.mkdir()
    ran = tmp_path / "fake-ninja-ran"
    (fake / "ninja").write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n")
    (fake / "ninja").chmod(0o755)
    proc = ds_doctor(
        *("run", "--level", "2", "-k", "zero_offload and z3-opt+param-bf16-ws1"),
        *("--out", str(tmp_path / "out"), "--json"),
        extra_env={"PATH": os.pathsep.join([str(fake), os.environ.get("PATH", "")])},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["outcome"] for r in json.loads(proc.stdout)["results"]] == ["pass"]
    assert not ran.exists() and "rebuilt" not in proc.stderr + proc.stdout


def test_a_rebuild_is_one_line_that_says_which_and_why(tmp_path: Path) -> None:
    from ds_doctor.run.extensions import built_ops, rebuilt_line

    folder = tmp_path / "ext"
    for op in ("cpu_adam", "fused_adam"):
        (folder / op).mkdir(parents=True)
        (folder / op / f"{op}.so").write_bytes(b"v1")
    before = built_ops(str(folder))
    assert rebuilt_line(str(folder), before) is None
    os.utime(folder / "cpu_adam" / "cpu_adam.so", ns=(1, 1))
    (folder / "shm").mkdir()
    (folder / "shm" / "shm.so").write_bytes(b"new")
    line = rebuilt_line(str(folder), before)
    assert line == (
        f"ds-doctor: DeepSpeed's ops in {folder}: built shm (not built there before); rebuilt cpu_adam: their build "
        "record did not match this run's (another ninja first on PATH, other compiler flags or headers); later runs "
        "load them"
    )


def test_py_cpuinfo_answers_every_rank_with_the_runs_one_answer(tmp_path: Path) -> None:
    """DeepSpeed calls cpuinfo.get_cpu_info() ~5 times per rank per launch, each a Python subprocess of ~1.1 s (12 s
    of a 33-s level 2). The parent asks once; a rank's get_cpu_info() parses that JSON as it parses its own
    subprocess's: the same dict."""
    from ds_doctor.run.cpufacts import CPUINFO_ENV, computed

    path = computed(tmp_path)
    assert path is not None and computed(tmp_path) == path  # asked once per run
    code = (
        "import time, cpuinfo; from ds_doctor.run import cpufacts; own = cpuinfo.get_cpu_info(); "
        "print(cpufacts.reuse()); start = time.perf_counter(); again = cpuinfo.get_cpu_info(); "
        "print(again == own, time.perf_counter() - start < 0.1)"
    )
    env = {**os.environ, CPUINFO_ENV: str(path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "True", "True"], out.stderr[-2000:]


def test_the_runs_py_cpuinfo_answer_is_asked_beside_the_launches_and_waited_for_when_deepspeed_asks(
    tmp_path: Path,
) -> None:
    """The parent does not wait for py-cpuinfo (1.1 s before the first launch): a process of its own asks, and a
    rank waits for the answer at DeepSpeed's first question; where py-cpuinfo failed there, the rank asks itself
    at once instead of waiting out WAIT_S."""
    from ds_doctor.run.cpufacts import FAILED, answer, ask

    path = ask(tmp_path)
    assert path == tmp_path / "cpuinfo.json" and ask(tmp_path) == path  # one process per run
    text = answer(path, wait_s=60)
    assert text is not None and json.loads(text)  # written by that process, once it had asked
    failed = tmp_path / "failed-run"
    failed.mkdir()
    (failed / FAILED).write_text("")
    started = time.perf_counter()
    assert answer(failed / "cpuinfo.json", wait_s=60) is None
    assert time.perf_counter() - started < 1

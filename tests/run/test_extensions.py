"""The ninja the ranks and the build phase run (this interpreter's), and py-cpuinfo asked once per run (where the ops
are built is tests/ops/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ds_doctor.probe.rankoptions import RankOptions
from ds_doctor.run.command import rank_environment
from tests.bounds import GENEROUS_S, PLANTED_HANG_S
from tests.test_e2e import ds_doctor


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
    assert not ran.exists() and ": built in" not in proc.stderr + proc.stdout


#: py-cpuinfo asks a Python subprocess (~1.1 s on 2 idle cores); its answer reused is parsed JSON (under 10 ms)
REUSE_RATIO = 10


def test_py_cpuinfo_answers_every_rank_with_the_runs_one_answer(tmp_path: Path) -> None:
    """DeepSpeed calls cpuinfo.get_cpu_info() ~5 times per rank per launch, each a Python subprocess of ~1.1 s (12 s
    of a 33-s level 2). The parent asks once; a rank's get_cpu_info() parses that JSON as it parses its own
    subprocess's: the same dict."""
    from ds_doctor.run.cpufacts import CPUINFO_ENV, computed

    path = computed(tmp_path)
    assert path is not None and computed(tmp_path) == path  # asked once per run
    # the same question, asked both ways in one process: the answer reused takes a fraction of py-cpuinfo's own
    code = (
        "import time, cpuinfo; from ds_doctor.run import cpufacts; start = time.perf_counter(); "
        "own = cpuinfo.get_cpu_info(); asked = time.perf_counter() - start; "
        "print(cpufacts.reuse()); start = time.perf_counter(); again = cpuinfo.get_cpu_info(); "
        f"print(again == own, time.perf_counter() - start < asked / {REUSE_RATIO})"
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
    assert answer(failed / "cpuinfo.json", wait_s=PLANTED_HANG_S) is None
    assert time.perf_counter() - started < GENEROUS_S  # WAIT_S waited out although py-cpuinfo had failed

"""The ninja the ranks and the build phase run (this interpreter's), and py-cpuinfo asked once per run (where the ops
are built is tests/ops/)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent does not wait for py-cpuinfo (1.1 s before the first launch): a process of its own asks, and a
    rank waits for the answer at DeepSpeed's first question; where py-cpuinfo failed there, the rank asks itself
    at once instead of waiting out WAIT_S."""
    from ds_doctor.run.cpufacts import _ASKING, FAILED, answer, ask

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing kept by an earlier run

    path = ask(tmp_path)
    assert path == tmp_path / "cpuinfo.json" and ask(tmp_path) == path  # one process per run
    assert tmp_path in _ASKING
    text = answer(path, wait_s=60)
    assert text is not None and json.loads(text)  # written by that process, once it had asked
    failed = tmp_path / "failed-run"
    failed.mkdir()
    (failed / FAILED).write_text("")
    started = time.perf_counter()
    assert answer(failed / "cpuinfo.json", wait_s=PLANTED_HANG_S) is None
    assert time.perf_counter() - started < GENEROUS_S  # WAIT_S waited out although py-cpuinfo had failed


def test_a_nodes_answer_is_kept_for_its_next_runs_where_this_user_alone_can_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next run on the node copies the answer an earlier run kept (no process, no second); one planted in a
    folder others can write is never read (it would choose the instructions DeepSpeed builds its ops with)."""
    from ds_doctor.run import cpufacts

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    runs = [tmp_path / f"run{i}" for i in range(3)]
    for run in runs:
        run.mkdir()
    first = cpufacts.computed(runs[0])
    kept = cpufacts.kept_path()
    assert first is not None and kept is not None and kept.read_text() == first.read_text()
    assert kept.parent.stat().st_mode & 0o077 == 0  # made this user's alone

    second = cpufacts.ask(runs[1])
    assert second is not None and second.read_text() == first.read_text()  # there at once: copied
    assert runs[1] not in cpufacts._ASKING

    planted = json.dumps({"flags": ["planted"]})
    kept.write_text(planted)
    kept.parent.chmod(0o770)  # a group member may write there now
    third = cpufacts.ask(runs[2])
    assert runs[2] in cpufacts._ASKING  # not read: asked afresh
    text = cpufacts.answer(third, wait_s=GENEROUS_S) if third is not None else None
    assert text is not None and "planted" not in text


def test_the_kept_answers_key_moves_with_the_cpu_and_not_with_its_clock() -> None:
    from ds_doctor.run.cpufacts import cache_key

    base = "processor\t: 0\nmodel name\t: Some CPU\ncpu MHz\t\t: 2400.000\n"
    base += "flags\t\t: fpu sse avx2\nbogomips\t: 4800.00\n"
    clocked = base.replace("2400.000", "3100.512").replace("4800.00", "4801.12")
    other = base.replace("avx2", "avx2 avx512f")
    assert cache_key(base, "9.0.0") == cache_key(clocked, "9.0.0")
    assert len({cache_key(base, "9.0.0"), cache_key(other, "9.0.0"), cache_key(base, "9.0.1")}) == 3

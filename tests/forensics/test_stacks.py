"""faulthandler's all-thread dump read back into folded stacks (a real dump of this process, not a sample)."""

from __future__ import annotations

import faulthandler
import tempfile
import threading

from ds_doctor.forensics.stacks import KEEP_FRAMES, fold, parse_faulthandler
from ds_doctor.reports.hang import Frame


def parked(ready: threading.Event, release: threading.Event) -> None:
    ready.set()
    release.wait()


def dump_with_a_parked_thread() -> tuple[str, int]:
    ready, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=parked, args=(ready, release), name="parker", daemon=True)
    thread.start()
    ready.wait()
    try:
        with tempfile.TemporaryFile("w+") as handle:
            faulthandler.dump_traceback(handle, all_threads=True)
            handle.seek(0)
            return handle.read(), thread.ident or 0
    finally:
        release.set()
        thread.join()


def test_every_thread_comes_back_named_with_its_own_frame_innermost() -> None:
    text, ident = dump_with_a_parked_thread()
    stacks = parse_faulthandler(text, {ident: "parker", threading.main_thread().ident or 0: "MainThread"})
    assert stacks[0].name == "MainThread" and stacks[0].current
    assert stacks[0].innermost is not None and stacks[0].innermost.function == "dump_with_a_parked_thread"
    parker = next(s for s in stacks if s.name == "parker")
    functions = [f.function for f in parker.frames]
    assert "parked" in functions and functions[0] == "wait"  # threading's own wait stays: it is innermost
    # the bootstrap frames are one marker
    assert any(f.folded and "Python" in f.function for f in parker.frames)
    parked_frame = next(f for f in parker.frames if f.function == "parked")
    assert parked_frame.file == __file__ and parked_frame.line == parked.__code__.co_firstlineno + 2


def test_a_thread_can_be_left_out_and_a_second_dump_replaces_the_first() -> None:
    text, ident = dump_with_a_parked_thread()
    assert all(
        s.name != "parker" for s in parse_faulthandler(text, {ident: "parker"}, skip=frozenset({ident}))
    )
    assert len(parse_faulthandler(text + "\n" + text)) == len(parse_faulthandler(text))


def test_fold_keeps_the_innermost_frame_and_folds_runs() -> None:
    torch = [Frame(f"t{i}", "/x/site-packages/torch/distributed/c10d.py", i) for i in range(3)]
    runner = [Frame(f"r{i}", "/repo/doctor/run/worker.py", i) for i in range(4)]
    probe = Frame("run", "/repo/probes/comm.py", 7)
    folded = fold([*torch, probe, *runner])
    assert [str(f) for f in folded] == [
        "t0 (/x/site-packages/torch/distributed/c10d.py:0)",
        "... 2 frames of torch",
        "run (/repo/probes/comm.py:7)",
        "... 4 frames of ds-doctor's runner",
    ]
    deep = fold([Frame(f"f{i}", "/app/m.py", i) for i in range(KEEP_FRAMES + 5)])
    assert len([f for f in deep if not f.folded]) == KEEP_FRAMES and deep[-1].function == "... 5 outer frames"

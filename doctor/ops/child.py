"""The process that builds or loads DeepSpeed's ops for a run (`python -m ds_doctor.ops.child EVENTS`).

It runs in the ranks' environment (the overlay first on the path for a `--with` stack), with its output (torch's and
ninja's, verbose) going to the build log, and tells the parent what happens as JSON lines in EVENTS: the folder
chosen, each op's start, a lock it waits on or clears, and each op's end (built, loaded, failed). SIGTERM and SIGHUP
end it as Ctrl-C does, so torch's own clean-up releases the build lock it holds."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ds_doctor.ops import DEEPSPEED_OPS, cache, locks
from ds_doctor.procs import die_with_parent

#: how often a wait on another builder's lock is judged again
WAIT_POLL_S = 2.0


class Events:
    def __init__(self, path: Path) -> None:
        self.file = path.open("a", encoding="utf-8")

    def __call__(self, event: str, **fields: Any) -> None:
        self.file.write(json.dumps({"event": event, "at": time.time(), **fields}) + "\n")
        self.file.flush()


def _stopped(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signum)  # torch's `finally` releases its lock; subprocess.run kills ninja


def wait_for_lock(folder: Path, op: str, say: Events) -> None:
    """Until `folder`'s lock is free: a stale one cleared (said), a held one waited on (said when its holder
    changes)."""
    last = None
    while True:
        state = locks.judge(folder)
        if state.state == "free":
            return
        if state.state == "stale" and locks.clear_stale(state):
            say("cleared", op=op, line=locks.cleared_line(op, state))
            continue
        if (state.state, state.holders) != last:
            say("waiting", op=op, line=state.waiting_line(op), holder=state.holder_words())
            last = (state.state, state.holders)
        time.sleep(WAIT_POLL_S)


def build_one(builder: Any, root: Path, say: Events) -> None:
    """One op: its lock judged, then built (or loaded where built), with a record of this builder beside torch's
    lock while it works."""
    op = builder.name
    folder = root / op
    folder.mkdir(parents=True, exist_ok=True)
    say("start", op=op, folder=str(folder))
    wait_for_lock(folder, op, say)
    before = cache.library_mtime(root, op)
    started = time.monotonic()
    record = locks.write_record(folder)
    try:
        builder.load(verbose=True)
    except Exception as exc:  # the op's failure is its own line; the others are still tried
        say("failed", op=op, seconds=time.monotonic() - started, reason=f"{type(exc).__name__}: {exc}"[:1500])
        return
    finally:
        record.unlink(missing_ok=True)
    after = cache.library_mtime(root, op)
    state = "built" if before is None else ("loaded" if after == before else "rebuilt")
    say("done", op=op, state=state, seconds=round(time.monotonic() - started, 1))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    say = Events(Path(args[0]))
    signal.signal(signal.SIGTERM, _stopped)
    signal.signal(signal.SIGHUP, _stopped)
    die_with_parent()  # a doctor killed outright leaves no build going on (SIGTERM: its lock released too)
    try:
        from deepspeed.accelerator import get_accelerator
    except Exception as exc:
        say("finished", error=f"DeepSpeed does not import: {type(exc).__name__}: {exc}"[:1500])
        return 0
    builders = []
    for name in DEEPSPEED_OPS:
        builder = get_accelerator().create_op_builder(name)
        if builder is None or not builder.is_compatible(verbose=False):
            say("skipped", op=name, reason="not built for this accelerator")
        elif _installed(builder.name):
            say("done", op=builder.name, state="installed", seconds=0.0)
        else:
            builders.append(builder)
    if builders:
        folder, why = cache.choose_root(os.environ, [b.name for b in builders])
        os.environ["TORCH_EXTENSIONS_DIR"] = str(folder)
        say("folder", path=str(folder), why=why)
        for builder in builders:
            build_one(builder, folder, say)
    say("finished")
    return 0


def _installed(op: str) -> bool:
    """Pre-compiled into the DeepSpeed install (`DS_BUILD_OPS=1`): loaded from there, never JIT-built."""
    try:
        from deepspeed.git_version_info import installed_ops

        return bool(installed_ops.get(op, False))
    except Exception:
        return False


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(128 + signal.SIGTERM)

"""A hung rank's Python stacks, from what `faulthandler` wrote on the stack signal (all threads, taken inside the
signal handler, so it works while the rank sits in a C++ collective or holds the GIL), read back into frames with
the noise folded: torch's internals and ds-doctor's own runner become one marker frame each run, the innermost
frame always stays (it names the collective or the call a thread is in).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ds_doctor.reports.hang import Frame, ThreadStack

KEEP_FRAMES = 12  # innermost frames kept per thread; the outer rest is one marker

_THREAD = re.compile(
    r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(?P<name>[^\]]*)\])? \(most recent call first\):"
)
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<function>.+)$')
#: Frames that only say how the call got there: torch's own layers, the doctor's runner, Python's bootstrap.
_FOLDED = (
    ("torch", re.compile(r"[/\\]torch[/\\]")),
    ("ds-doctor's runner", re.compile(r"[/\\]doctor[/\\]run[/\\]")),
    ("Python", re.compile(r"^<frozen |[/\\]threading\.py$|[/\\]runpy\.py$")),
)


def _folded_kind(frame: Frame) -> str | None:
    return next((kind for kind, pattern in _FOLDED if pattern.search(frame.file)), None)


def fold(frames: list[Frame]) -> tuple[Frame, ...]:
    """Innermost first; the innermost frame is kept whatever it is, runs of folded kinds become one marker each."""
    out: list[Frame] = frames[:1]
    run_kind, run = None, 0
    for frame in frames[1:]:
        kind = _folded_kind(frame)
        if kind is not None and kind == run_kind:
            run += 1
            continue
        if run:
            out.append(Frame(f"... {run} frame{'s' if run > 1 else ''} of {run_kind}"))
        run_kind, run = kind, 1 if kind else 0
        if kind is None:
            out.append(frame)
    if run:
        out.append(Frame(f"... {run} frame{'s' if run > 1 else ''} of {run_kind}"))
    kept = [f for f in out if not f.folded]
    if len(kept) > KEEP_FRAMES:
        last = out.index(kept[KEEP_FRAMES - 1])
        rest = sum(1 for f in out[last + 1 :] if not f.folded)
        out = [*out[: last + 1], Frame(f"... {rest} outer frames")]
    return tuple(out)


def parse_faulthandler(
    text: str, names: Mapping[int, str] | None = None, skip: frozenset[int] = frozenset()
) -> tuple[ThreadStack, ...]:
    """The threads of the last dump in `text`, the main thread first; `names`: thread ident -> name (the ones the
    rank's forensics thread wrote), `skip`: idents to leave out (that thread itself)."""
    threads: list[tuple[int, bool, str | None, list[Frame]]] = []
    for line in text.splitlines():
        if head := _THREAD.match(line):
            ident = int(head.group(2), 16)
            if threads and ident in {t[0] for t in threads}:  # a second dump begins: keep only the last one
                threads = []
            threads.append((ident, head.group(1) == "Current thread", head.group("name"), []))
        elif threads and (frame := _FRAME.match(line)):
            threads[-1][3].append(Frame(frame["function"].strip(), frame["file"], int(frame["line"])))
    stacks = [
        ThreadStack((names or {}).get(ident) or name or f"thread {ident:#x}", fold(frames), current)
        for ident, current, name, frames in threads
        if ident not in skip
    ]
    return tuple(sorted(stacks, key=lambda s: s.name != "MainThread"))

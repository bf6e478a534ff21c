"""The collectives each rank issued, from torch's Flight Recorder, lined up across ranks by torch's own analyzer
(`torch.distributed.flight_recorder`, the code behind `torchfrtrace`).

On a rank: `dump()` is this process's recorder buffer. Torch 2.13 records gloo as well as NCCL, but gloo's dump
leaves `pg_config` empty (no group names, no ranks), and the analyzer cannot map a single entry without it, so the
dump is completed from torch's own group registry. Where there is no recorder (an older torch) the thin record
(`ds_doctor.forensics.thin_record`) stands in, in the same format, so one analysis serves both.

In the parent, or in `ds-doctor triage DIR`: `load_dir` reads the dumps (a restricted unpickler: a dump is plain
data, and a pickle from a user's job must not run code), `positions` says where each rank stands in each group, and
`disagreements` runs torch's analyzer and keeps what it found: a collective some ranks never joined, or one whose
op, sizes or dtypes differ across ranks.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import itertools
import logging
import os
import pickle
import re
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ds_doctor.forensics.dumpcheck import FORMAT_VERSION, Refused, checked_dump, unpickle
from ds_doctor.reports.hang import CollectivePosition
from ds_doctor.userinput import MAX_DUMP_BYTES, MAX_RANKS, size_text

BUFFER_ENTRIES = 2000  # TORCH_FR_BUFFER_SIZE of the doctor's launches, unless the user set one


# ---- on a rank ---------------------------------------------------------------------------------------------------


def group_config() -> dict[str, dict[str, str]]:
    """Every live process group as the recorder's `pg_config` has it: name -> {name, desc, ranks}."""
    from torch.distributed import distributed_c10d as c10d

    config: dict[str, dict[str, str]] = {}
    for group, ranks in c10d._world.pg_group_ranks.items():
        name = str(c10d._world.pg_names[group])
        config[name] = {
            "name": name,
            "desc": str(getattr(group, "group_desc", "undefined")),
            "ranks": str(sorted(ranks)),
        }
    return config


def recorder_dump(backend: str) -> dict[str, Any] | None:
    """This rank's Flight Recorder buffer, its groups filled in; None where this torch has no recorder to dump."""
    import torch._C._distributed_c10d as c10d_ext

    reader = getattr(c10d_ext, "_dump_nccl_trace", None) if backend == "nccl" else None
    reader = reader or getattr(c10d_ext, "_dump_fr_trace", None)
    if reader is None:
        return None
    try:  # no stack traces: symbolizing them imports torch._inductor on the first dump (1 s here), and the stacks
        raw = reader(includeStackTraces=False)  # come from faulthandler anyway
    except TypeError:  # a torch whose reader takes no arguments
        raw = reader()
    dump = pickle.loads(raw)
    dump["pg_config"] = {**dump.get("pg_config", {}), **group_config()}
    return dump


def recorder_available() -> bool:
    import torch._C._distributed_c10d as c10d_ext

    return hasattr(c10d_ext, "_dump_fr_trace") and os.environ.get("DS_DOCTOR_COLLECTIVE_RECORD") != "thin"


# ---- reading and analysing dumps ---------------------------------------------------------------------------------

MAX_DIR_BYTES = 128 * 2**20  # the dumps of one folder, together (read at a few MB/s: plain data, in Python)
MAX_FILES = 10_000  # files looked at in a dump folder

_RANK = re.compile(r"(\d+)$")


def _candidates(directory: Path, problems: list[str]) -> list[Path]:
    """Files under `directory` named `<prefix><rank>`: no symlink followed, at most MAX_FILES entries (files and
    folders) looked at, walked with a stack of its own (Python 3.11's os.walk recurses: a folder nested 1,100 deep
    was a RecursionError), in name order, depth first."""
    found: list[Path] = []
    seen = 0
    pending = [directory]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            problems.append(f"{folder}: skipped: {exc.strerror or exc}")
            continue
        subfolders = []
        for entry in entries:
            seen += 1
            if seen > MAX_FILES:
                problems.append(f"{directory}: stopped looking after {MAX_FILES:,} entries")
                return found
            if entry.is_dir(follow_symlinks=False):
                subfolders.append(Path(entry.path))
            elif _RANK.search(entry.name) is None:
                continue
            elif entry.is_symlink():
                problems.append(f"{entry.name}: skipped: a symlink (not followed)")
            elif entry.is_file(follow_symlinks=False):
                found.append(Path(entry.path))
        pending.extend(reversed(subfolders))
    return found


def _read_dump(path: Path, budget: int) -> bytes | str:
    """The file's bytes, or why it was skipped (opened without following a link or waiting on a FIFO)."""
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_CLOEXEC", 0)
    )
    with open(os.open(path, flags), "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
            return ""
        if info.st_size > MAX_DUMP_BYTES:
            return f"skipped: {size_text(info.st_size)}, more than the {size_text(MAX_DUMP_BYTES)} a dump may have"
        if info.st_size > budget:
            return f"skipped: the folder's dumps are more than {size_text(MAX_DIR_BYTES)} together"
        if handle.read(1) != b"\x80":
            return "not a Flight Recorder dump (not a pickle)"
        return b"\x80" + handle.read(MAX_DUMP_BYTES)


def load_dir(directory: Path) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """rank -> dump for every file under `directory` named `<prefix><rank>` that unpickles (plain data only) to a
    recorder dump whose every field checks out (`ds_doctor.forensics.dumpcheck`); and one line per file that did not,
    or was skipped."""
    dumps: dict[int, Any] = {}
    problems: list[str] = []
    budget = MAX_DIR_BYTES
    for path in _candidates(directory, problems):
        digits = _RANK.search(path.name).group(1)  # type: ignore[union-attr]
        if len(digits) > 7 or int(digits) >= MAX_RANKS:
            problems.append(
                f"{path.name}: skipped: rank {digits[:20]} is beyond the {MAX_RANKS:,} a job can have"
            )
            continue
        try:
            raw = _read_dump(path, budget)
        except OSError as exc:
            problems.append(f"{path.name}: cannot read it: {exc.strerror or exc}")
            continue
        if isinstance(raw, str):
            problems += [f"{path.name}: {raw}"] if raw else []
            continue
        budget -= len(raw)
        try:
            data = unpickle(raw)
        except Exception as exc:  # whatever a hostile pickle makes the unpickler raise
            problems.append(f"{path.name}: not a Flight Recorder dump ({type(exc).__name__}: {exc})"[:300])
            continue
        try:
            dumps[int(digits)] = checked_dump(data, len(raw))
        except Refused as exc:
            problems.append(f"{path.name}: refused: {exc}"[:300])
    return dumps, problems


def _op(entry: dict[str, Any]) -> str:
    return str(entry.get("profiling_name", "?")).split(":")[-1]


def _sizes(entry: dict[str, Any]) -> str:
    dtypes = ",".join(sorted(set(entry.get("input_dtypes") or []))) or "?"
    return f"{entry.get('input_sizes')} {dtypes}"


def _group(entry: dict[str, Any]) -> str:
    name, desc = [*(entry.get("process_group") or ("?",)), ""][:2]
    return f"{name}:{desc}" if desc and desc != "undefined" else str(name)


def _done(entry: dict[str, Any]) -> bool:
    # gloo's recorder leaves every state at "scheduled" and marks completion by retiring the entry
    return bool(entry.get("retired")) or entry.get("state") == "completed"


def positions(dump: dict[str, Any]) -> tuple[CollectivePosition, ...]:
    """Where one rank stands in each of its groups: the last collective it completed, the first it has not."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for entry in dump.get("entries", []):
        if not entry.get("is_p2p"):
            by_group.setdefault(_group(entry), []).append(entry)
    out = []
    for group, entries in by_group.items():
        done = [int(e.get("collective_seq_id", 0)) for e in entries if _done(e)]
        pending = next((e for e in entries if not _done(e)), None)
        out.append(
            CollectivePosition(
                group,
                max(done, default=0),
                _op(pending) if pending else None,
                pending.get("collective_seq_id") if pending else None,
                _sizes(pending) if pending else None,
                str(pending.get("state")) if pending else None,
            )
        )
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Disagreement:
    """What torch's analyzer found wrong with one collective: ranks that never joined it, or ranks in another op."""

    group: str
    seq: int
    op: str
    sizes: str
    expected: tuple[int, ...]
    missing: tuple[int, ...] = ()
    sides: dict[int, str] = dataclasses.field(default_factory=dict)  # rank -> "op of sizes", for a mismatch
    culprit: int | None = None
    kind: str = ""  # the analyzer's MatchState name, for a mismatch


def _known_groups(dumps: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The dumps with entries of groups no rank's pg_config knows (destroyed since) left out: the analyzer stops at
    the first entry whose group it cannot place."""
    out = {}
    for rank, dump in dumps.items():
        known = set(dump.get("pg_config", {}))
        entries = [e for e in dump["entries"] if (e.get("process_group") or ["?"])[0] in known]
        out[rank] = {
            "host_name": f"rank{rank}",
            "rank": rank,
            "entries": entries,
            "version": str(dump.get("version", FORMAT_VERSION)),
            "pg_config": dump.get("pg_config", {}),
        }
    return out


ANALYZER_SECONDS = 60.0  # torch's analyzer is quadratic in places: many groups and entries take minutes
MAX_DISAGREEMENTS = 50  # the earliest collectives the ranks disagree on are the ones that matter


class _TooLong(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Stop the Python code run inside after `seconds` (a profile hook looks at the clock every 4096 calls and
    raises _TooLong into it), from any thread and with nothing left running."""
    deadline = time.monotonic() + seconds
    calls = itertools.count()

    def check(frame: Any, event: str, arg: Any) -> None:
        if next(calls) % 4096 == 0 and time.monotonic() > deadline:
            raise _TooLong

    previous = sys.getprofile()
    sys.setprofile(check)
    try:
        yield
    finally:
        sys.setprofile(previous)


def _run_analyzer(dumps: dict[int, dict[str, Any]]) -> Any:
    quiet = logging.getLogger("Flight Recorder")
    quiet.disabled = True  # it logs each finding (and a missing `tabulate` on import); ours are the findings
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig

        args = JobConfig().parse_args(["--allow-incomplete-ranks", "--mismatch_cap", "10", "."])
        details = {f"rank_{rank}": dump for rank, dump in copy.deepcopy(_known_groups(dumps)).items()}
        with contextlib.redirect_stdout(io.StringIO()), _time_limit(ANALYZER_SECONDS):
            return build_db(details, args, next(iter(details.values()))["version"])
    finally:
        quiet.disabled = False


def _sides(dumps: dict[int, dict[str, Any]], group: str, seq: int, ranks: tuple[int, ...]) -> dict[int, str]:
    """rank -> "all_reduce of [[1024]] Float": what each rank issued as collective `seq` of the group."""
    sides = {}
    for rank in ranks:
        entry = next(
            (
                e
                for e in dumps.get(rank, {}).get("entries", [])
                if (e.get("process_group") or ["?"])[0] == group
                and e.get("collective_seq_id") == seq
                and not e.get("is_p2p")
            ),
            None,
        )
        if entry is not None:
            sides[rank] = f"{_op(entry)} of {_sizes(entry)}"
    return sides


def disagreements(dumps: dict[int, dict[str, Any]]) -> tuple[list[Disagreement], str | None]:
    """Torch's analyzer over the dumps; and why it could not run, if it could not."""
    if not dumps:
        return [], "no rank's collectives were recorded"
    try:
        db = _run_analyzer(dumps)
    except _TooLong:
        return [], (
            f"torch's Flight Recorder analyzer did not finish in {ANALYZER_SECONDS:.0f} s "
            f"({sum(len(d['entries']) for d in dumps.values()):,} entries of {len(dumps)} ranks)"
        )
    except Exception as exc:
        return [], f"torch's Flight Recorder analyzer failed: {type(exc).__name__}: {exc}"[:300]
    out: list[Disagreement] = []
    for c in db.collectives:
        if len(out) >= MAX_DISAGREEMENTS:
            break
        group, op, sizes = c.pg_desc, c.collective_name.split(":")[-1], str(c.input_sizes)
        expected = tuple(sorted(c.expected_ranks))
        if c.missing_ranks:
            out.append(
                Disagreement(group, c.collective_seq_id, op, sizes, expected, tuple(sorted(c.missing_ranks)))
            )
        if c.mismatch_collectives:
            sides = _sides(dumps, c.group_id, c.collective_seq_id, expected)
            info = next(
                (o.type_of_mismatch for o in c.mismatch_collectives.values() if o.type_of_mismatch), None
            )
            culprit = getattr(info, "culprit", None)
            out.append(
                Disagreement(
                    group,
                    c.collective_seq_id,
                    op,
                    sizes,
                    expected,
                    sides=sides,
                    culprit=int(culprit)
                    if culprit is not None and str(culprit).isdigit()
                    else min(c.mismatch_collectives),
                    kind=getattr(getattr(info, "_state", None), "name", "mismatch"),
                )
            )
    return out, None

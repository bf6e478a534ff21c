"""The collectives each rank issued, from torch's Flight Recorder, lined up across ranks by torch's own analyzer
(`torch.distributed.flight_recorder`, the code behind `torchfrtrace`).

On a rank: `dump()` is this process's recorder buffer. Torch 2.13 records gloo as well as NCCL, but gloo's dump
leaves `pg_config` empty (no group names, no ranks), and the analyzer cannot map a single entry without it, so the
dump is completed from torch's own group registry. Where there is no recorder (an older torch) the thin record
(`doctor.forensics.thin_record`) stands in, in the same format, so one analysis serves both.

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
import logging
import os
import pickle
import re
from pathlib import Path
from typing import Any

from reports.hang import CollectivePosition

BUFFER_ENTRIES = 2000  # TORCH_FR_BUFFER_SIZE of the doctor's launches, unless the user set one
FORMAT_VERSION = "2.10"  # the recorder format of torch 2.13, which the thin record writes too


# ---- on a rank ---------------------------------------------------------------------------------------------------

def group_config() -> dict[str, dict[str, str]]:
    """Every live process group as the recorder's `pg_config` has it: name -> {name, desc, ranks}."""
    from torch.distributed import distributed_c10d as c10d

    config = {}
    for group, ranks in c10d._world.pg_group_ranks.items():
        name = c10d._world.pg_names[group]
        config[name] = {"name": name, "desc": getattr(group, "group_desc", "undefined"), "ranks": str(sorted(ranks))}
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

class _PlainData(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a Flight Recorder dump holds plain data only, not {module}.{name}")


_RANK = re.compile(r"(\d+)$")


def load_dir(directory: Path) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """rank -> dump for every file under `directory` named `<prefix><rank>` that unpickles to a recorder dump;
    and one line per file that did not."""
    dumps, problems = {}, []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        rank = _RANK.search(path.name)
        if rank is None or path.stat().st_size == 0:
            continue
        try:
            data = _PlainData(io.BytesIO(path.read_bytes())).load()
        except Exception as exc:
            problems.append(f"{path.name}: not a Flight Recorder dump ({type(exc).__name__}: {exc})"[:300])
            continue
        if not isinstance(data, dict) or not isinstance(data.get("entries"), list):
            problems.append(f"{path.name}: not a Flight Recorder dump (no entries)")
            continue
        dumps[int(rank.group(1))] = data
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
        out.append(CollectivePosition(
            group, max(done, default=0), _op(pending) if pending else None,
            int(pending["collective_seq_id"]) if pending else None, _sizes(pending) if pending else None,
            str(pending.get("state")) if pending else None))
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
        out[rank] = {"host_name": f"rank{rank}", "rank": rank, "entries": entries,
                     "version": str(dump.get("version", FORMAT_VERSION)), "pg_config": dump.get("pg_config", {})}
    return out


def _run_analyzer(dumps: dict[int, dict[str, Any]]) -> Any:
    quiet = logging.getLogger("Flight Recorder")
    quiet.disabled = True  # it logs each finding (and a missing `tabulate` on import); ours are the findings
    try:
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig

        args = JobConfig().parse_args(["--allow-incomplete-ranks", "--mismatch_cap", "10", "."])
        details = {f"rank_{rank}": dump for rank, dump in copy.deepcopy(_known_groups(dumps)).items()}
        with contextlib.redirect_stdout(io.StringIO()):
            return build_db(details, args, next(iter(details.values()))["version"])
    finally:
        quiet.disabled = False


def _sides(dumps: dict[int, dict[str, Any]], group: str, seq: int, ranks: tuple[int, ...]) -> dict[int, str]:
    """rank -> "all_reduce of [[1024]] Float": what each rank issued as collective `seq` of the group."""
    sides = {}
    for rank in ranks:
        entry = next((e for e in dumps.get(rank, {}).get("entries", [])
                      if (e.get("process_group") or ["?"])[0] == group and e.get("collective_seq_id") == seq
                      and not e.get("is_p2p")), None)
        if entry is not None:
            sides[rank] = f"{_op(entry)} of {_sizes(entry)}"
    return sides


def disagreements(dumps: dict[int, dict[str, Any]]) -> tuple[list[Disagreement], str | None]:
    """Torch's analyzer over the dumps; and why it could not run, if it could not."""
    if not dumps:
        return [], "no rank's collectives were recorded"
    try:
        db = _run_analyzer(dumps)
    except Exception as exc:
        return [], f"torch's Flight Recorder analyzer failed: {type(exc).__name__}: {exc}"[:300]
    out = []
    for c in db.collectives:
        group, op, sizes = c.pg_desc, c.collective_name.split(":")[-1], str(c.input_sizes)
        expected = tuple(sorted(c.expected_ranks))
        if c.missing_ranks:
            out.append(Disagreement(group, c.collective_seq_id, op, sizes, expected, tuple(sorted(c.missing_ranks))))
        if c.mismatch_collectives:
            sides = _sides(dumps, c.group_id, c.collective_seq_id, expected)
            info = next((o.type_of_mismatch for o in c.mismatch_collectives.values() if o.type_of_mismatch), None)
            culprit = getattr(info, "culprit", None)
            out.append(Disagreement(group, c.collective_seq_id, op, sizes, expected, sides=sides,
                                    culprit=int(culprit) if culprit is not None and str(culprit).isdigit()
                                    else min(c.mismatch_collectives),
                                    kind=getattr(getattr(info, "_state", None), "name", "mismatch")))
    return out, None

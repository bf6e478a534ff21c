"""A Flight Recorder dump from a user's folder, read as plain data and checked field by field before any code
reads it (`ds_doctor.forensics.flight` reads the folder and runs torch's analyzer over what passes).

Why: torch's analyzer `eval`s a group's `ranks` string where `ast.literal_eval` of it gives a string
(torch/distributed/flight_recorder/components/builder.py, build_groups_memberships), so a dump holding nothing but
strings could run code as the user running `ds-doctor triage`; and its loader unpickles without restriction. Here a
dump is unpickled by a plain-data unpickler, every field the analyzer or `positions` reads is checked for its type
and size, `ranks` is rewritten as the "[0, 1]" the analyzer expects (never a string of a string), and the dump handed
on holds those fields only. Depth, value count and sizes are bounded: a 528-byte pickle of shared references is a
structure of billions of values when walked.
"""

from __future__ import annotations

import builtins
import io
import pickle
import re
from collections.abc import Callable
from typing import Any, ClassVar

from ds_doctor.userinput import MAX_RANKS, short

FORMAT_VERSION = "2.10"  # the recorder format of torch 2.13, which the thin record writes too


_PurePython: Any = pickle._Unpickler  # a private class: no stubs say what it holds


class _PlainData(_PurePython):
    """The pure-Python unpickler, for plain data only: no class, no callable, no extension, no persistent id, no
    set, and dict keys that are strings (their hash is seeded per process: int keys can be made to collide, and a
    key of shared nested tuples takes exponential time to hash). Not the C unpickler: it sizes its memo by the
    largest index a pickle names, and 9 bytes ask it for gigabytes."""

    dispatch: ClassVar[dict[int, Any]] = dict(_PurePython.dispatch)

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a Flight Recorder dump holds plain data only, not {module}.{name}")

    def refuse(self) -> None:
        raise pickle.UnpicklingError(
            "a Flight Recorder dump holds plain data only (dicts, lists, strings, numbers)"
        )

    def string_keys(self, keys: list[Any]) -> None:
        if any(type(key) is not str for key in keys):
            raise pickle.UnpicklingError("a Flight Recorder dump's keys are strings")

    # the pure-Python unpickler keeps what came since the last MARK as self.stack
    def load_dict(self) -> None:
        self.string_keys(self.stack[::2])
        super().load_dict()

    def load_setitem(self) -> None:
        self.string_keys(self.stack[-2:-1])
        super().load_setitem()

    def load_setitems(self) -> None:
        self.string_keys(self.stack[::2])
        super().load_setitems()

    for _op in (
        pickle.REDUCE,
        pickle.BUILD,
        pickle.INST,
        pickle.OBJ,
        pickle.NEWOBJ,
        pickle.NEWOBJ_EX,
        pickle.EXT1,
        pickle.EXT2,
        pickle.EXT4,
        pickle.PERSID,
        pickle.BINPERSID,
        pickle.NEXT_BUFFER,
        pickle.READONLY_BUFFER,
        pickle.EMPTY_SET,
        pickle.ADDITEMS,
        pickle.FROZENSET,
    ):
        dispatch[_op[0]] = refuse
    for _op, _load in (
        (pickle.DICT, load_dict),
        (pickle.SETITEM, load_setitem),
        (pickle.SETITEMS, load_setitems),
    ):
        dispatch[_op[0]] = _load
    del _op, _load


MAX_ENTRIES = 20_000  # a rank's recorder entries (TORCH_FR_BUFFER_SIZE is 2000 by default)
MAX_GROUPS = 1_000  # process groups in a pg_config
MAX_NODES = 5_000_000  # values in one dump, shared references counted each time they are reached...
# ...and no more than one per byte of the pickle (a plain dump spends two bytes or more a value)
NODES_PER_BYTE = 1
_INT_RANGE = range(-(2**63), 2**64)


class Refused(ValueError):
    """A dump that holds something other than what the recorder writes; the message says what and where."""


class _Check:
    def __init__(self, budget: int) -> None:
        self.left = self.budget = budget

    def take(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            raise Refused(
                f"more than {self.budget:,} values (shared references counted each time they are reached)"
            )

    def int(self, value: Any, where: str, *, none: bool = False) -> int | None:
        self.take()
        if value is None and none:
            return None
        if type(value) is not int or value not in _INT_RANGE:
            raise Refused(f"{where} is {short(value)}, not a 64-bit integer")
        return value

    def text(self, value: Any, where: str, limit: builtins.int = 4096) -> str:
        self.take()
        if type(value) is not str or len(value) > limit:
            raise Refused(f"{where} is {short(value)}, not a string of at most {limit:,} characters")
        return value

    def items(self, value: Any, where: str, limit: builtins.int) -> list[Any]:
        if type(value) not in (list, tuple) or len(value) > limit:
            raise Refused(f"{where} is {short(value)}, not a list of at most {limit:,} items")
        self.take(len(value) + 1)
        return list(value)

    def sizes(self, value: Any, where: str) -> list[list[builtins.int]]:
        return [
            [self.int(n, where) or 0 for n in self.items(shape, where, 64)]
            for shape in self.items(value, where, 100_000)
        ]

    def frames(self, value: Any, where: str) -> list[dict[str, Any]]:
        out = []
        for frame in self.items(value, where, 1000):
            if type(frame) is not dict:
                raise Refused(f"{where} holds {short(frame)}, not a frame")
            out.append(
                {
                    "name": self.text(frame.get("name"), f"{where} name"),
                    "filename": self.text(frame.get("filename"), f"{where} filename"),
                    "line": self.int(frame.get("line"), f"{where} line"),
                }
            )
        return out

    def entry(self, value: Any, where: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise Refused(f"{where} is {short(value)}, not a recorder entry")
        out: dict[str, Any] = {}
        for key, field in value.items():
            convert = self._converter(key)
            if convert is not None:  # any other field is left out: nothing reads it
                out[key] = convert(field, f"{where} {key}", key)
        return out

    def _converter(self, key: str) -> Callable[[Any, str, str], Any] | None:
        """How one field of an entry is checked and kept, by its key."""
        if key in _INTS:
            return lambda field, at, key: self.int(field, at, none=key in _OPTIONAL)
        if key in _BOOLS:
            return self._flag
        if key in _TEXTS:
            return lambda field, at, key: (
                self.text(field, at, 256) if key != "thread_id" or type(field) is not int else field
            )
        by_key: dict[str, Callable[[Any, str, str], Any]] = {
            "duration_ms": self._duration,
            "process_group": self._group,
            "input_sizes": lambda field, at, _key: self.sizes(field, at),
            "output_sizes": lambda field, at, _key: self.sizes(field, at),
            "input_dtypes": self._dtypes,
            "output_dtypes": self._dtypes,
            "frames": lambda field, at, _key: self.frames(field, at),
        }
        return by_key.get(key)

    @staticmethod
    def _flag(field: Any, at: str, _key: str) -> bool:
        if type(field) is not bool:
            raise Refused(f"{at} is {short(field)}, not true or false")
        return field

    @staticmethod
    def _duration(field: Any, at: str, _key: str) -> Any:
        if field is not None and type(field) not in (int, float):
            raise Refused(f"{at} is {short(field)}, not a number")
        return field

    def _group(self, field: Any, at: str, _key: str) -> tuple[str, ...]:
        group = self.items(field, at, 2)
        kept = tuple(self.text(part, at, 256) for part in group)
        if len(group) != 2:
            raise Refused(f"{at} is {short(field)}, not [name, description]")
        return kept

    def _dtypes(self, field: Any, at: str, _key: str) -> list[str]:
        return [self.text(name, at, 64) for name in self.items(field, at, 100_000)]


_INTS = frozenset(
    {
        "record_id",
        "pg_id",
        "collective_seq_id",
        "p2p_seq_id",
        "op_id",
        "time_created_ns",
        "time_discovered_started_ns",
        "time_discovered_completed_ns",
        "timeout_ms",
    }
)
_OPTIONAL = frozenset({"time_discovered_started_ns", "time_discovered_completed_ns", "timeout_ms"})
_BOOLS = frozenset({"retired", "is_p2p"})
_TEXTS = frozenset({"profiling_name", "state", "thread_name", "thread_id"})
_VERSION = re.compile(r"(\d{1,4}\.\d{1,4})?")


def canonical_ranks(value: Any, where: str) -> str:
    """A group's ranks as "[0, 1, 2]": from that string (read without eval) or from a list of rank numbers."""
    if type(value) is str:
        inner = value.strip()
        if len(inner) > 8 * MAX_RANKS or inner[:1] + inner[-1:] not in ("[]", "()"):
            raise Refused(f"{where} is {short(value)}, not a list of rank numbers")
        parts = [part.strip() for part in inner[1:-1].split(",")] if inner[1:-1].strip() else []
        if parts and not parts[-1] and inner[0] == "(":
            parts.pop()  # "(0,)"
        if not all(part.isascii() and part.isdigit() and len(part) <= 7 for part in parts):
            raise Refused(f"{where} is {short(value)}, not a list of rank numbers")
        ranks = [int(part) for part in parts]
    elif type(value) in (list, tuple) and all(type(rank) is int for rank in value):
        ranks = list(value)
    else:
        raise Refused(f"{where} is {short(value)}, not a list of rank numbers")
    if len(ranks) > MAX_RANKS or not all(0 <= rank < MAX_RANKS for rank in ranks):
        raise Refused(f"{where} names more ranks, or a higher rank, than the {MAX_RANKS:,} a job can have")
    return f"[{', '.join(map(str, ranks))}]"


def checked_dump(data: Any, size: int = MAX_NODES) -> dict[str, Any]:
    """The dump as the recorder writes it, from the fields anything here reads, each checked; Refused otherwise.
    `size`: the pickle's length in bytes, which bounds the values it may hold."""
    if type(data) is not dict or type(data.get("entries")) is not list:
        raise Refused("no entries")
    check = _Check(min(MAX_NODES, 100_000 + NODES_PER_BYTE * size))
    version = data.get("version", FORMAT_VERSION)
    if type(version) is not str or not _VERSION.fullmatch(version):
        raise Refused(f"version is {short(version)}, not major.minor")
    groups = data.get("pg_config") or {}
    if type(groups) is not dict or len(groups) > MAX_GROUPS:
        raise Refused(f"pg_config is {short(groups)}, not a table of at most {MAX_GROUPS:,} process groups")
    pg_config = {}
    for name, group in groups.items():
        where = f"pg_config {short(name, 40)}"
        if type(name) is not str or len(name) > 256 or type(group) is not dict:
            raise Refused(f"{where} is {short(group)}, not a process group")
        pg_config[name] = {
            "name": check.text(group.get("name", name), f"{where} name", 256),
            "desc": check.text(group.get("desc", "undefined"), f"{where} desc", 256),
            "ranks": canonical_ranks(group.get("ranks", "[]"), f"{where} ranks"),
        }
    entries = check.items(data["entries"], "entries", MAX_ENTRIES)
    out = {
        "version": version,
        "pg_config": pg_config,
        "entries": [check.entry(entry, f"entry {i}") for i, entry in enumerate(entries)],
    }
    for key, limit in (("source", 200), ("error", 2000)):
        if key in data:
            out[key] = check.text(data[key], key, limit)
    return out


def unpickle(raw: bytes) -> Any:
    """Plain data from a pickle; pickle.UnpicklingError (or whatever a hostile pickle makes the unpickler raise)
    otherwise."""
    return _PlainData(io.BytesIO(raw)).load()

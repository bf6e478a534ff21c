"""Flight Recorder dumps from a stranger's folder (`ds-doctor triage DIR`): nothing in them runs, however they are
built; what is not a dump is skipped with a line; torch's analyzer gets checked fields only, and a bounded time."""

from __future__ import annotations

import builtins
import os
import pickle
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from ds_doctor.cli import main
from ds_doctor.forensics import flight
from ds_doctor.forensics.dumpcheck import Refused, canonical_ranks, checked_dump, unpickle
from ds_doctor.forensics.flight import disagreements, load_dir, positions
from tests.bounds import GENEROUS_S


def entry(seq: int, op: str = "all_reduce", state: str = "completed", group: str = "0") -> dict[str, Any]:
    return {
        "record_id": seq,
        "pg_id": 0,
        "process_group": (group, "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": f"gloo:{op}",
        "time_created_ns": 1,
        "input_sizes": [[4]],
        "output_sizes": [[4]],
        "input_dtypes": ["Float"],
        "output_dtypes": ["Float"],
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": state == "completed",
        "timeout_ms": 600000,
        "is_p2p": False,
        "thread_id": "1",
        "thread_name": "main",
        "frames": [{"name": "train", "filename": "train.py", "line": 3}],
    }


def dump(ranks: Any = "[0, 1]", entries: list | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
        "pg_status": {"0": {"last_completed_collective": 1}},
        "comm_lib_version": "",
        "entries": [entry(1)] if entries is None else entries,
        **extra,
    }


def write(folder: Path, name: str, data: Any) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_bytes(data if isinstance(data, bytes) else pickle.dumps(data))
    return path


def payloads(marker: Path) -> dict[str, Any]:
    """Every way a dump's `ranks` could carry code to torch's analyzer (builder.py: literal_eval, then eval of a
    string; transform_ft: eval)."""
    code = f"__import__('os').system('touch {marker}')"
    return {
        "a string of a string (literal_eval, then eval)": repr(code),
        "code itself": code,
        "a list of code": [code],
        "code in a list literal": f"[{code}]",
    }


@pytest.mark.parametrize(
    "way",
    [
        "a string of a string (literal_eval, then eval)",
        "code itself",
        "a list of code",
        "code in a list literal",
    ],
)
def test_a_dump_whose_ranks_are_code_is_refused_and_nothing_runs(
    tmp_path: Path, way: str, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "PWNED_xyz"
    write(tmp_path / "dumps", "rank_0", dump(payloads(marker)[way]))
    dumps, problems = load_dir(tmp_path / "dumps")
    assert (
        dumps == {}
        and len(problems) == 1
        and problems[0].startswith("rank_0: refused: pg_config '0' ranks is")
    )
    assert main(["triage", str(tmp_path / "dumps")]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("ds-doctor: error:")
        and "rank_0: refused:" in err
        and len(err.strip().splitlines()) == 1
    )
    assert not marker.exists()


def test_a_good_dump_beside_a_refused_one_is_read_and_the_refusal_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "PWNED_xyz"
    write(tmp_path / "dumps", "rank_0", dump(entries=[entry(1), entry(2, state="scheduled")]))
    write(
        tmp_path / "dumps", "rank_1", dump(payloads(marker)["a string of a string (literal_eval, then eval)"])
    )
    assert main(["triage", str(tmp_path / "dumps")]) in (0, 1)
    out = capsys.readouterr().out
    assert "rank_1: refused: pg_config '0' ranks" in out and "Flight Recorder dumps of rank(s) 0" in out
    assert not marker.exists()


def test_ranks_reach_the_analyzer_as_a_list_literal_and_eval_is_never_called(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert canonical_ranks("[0, 1,2 ]", "r") == canonical_ranks([0, 1, 2], "r") == "[0, 1, 2]"
    assert canonical_ranks("(3,)", "r") == "[3]" and canonical_ranks("[]", "r") == "[]"
    for bad in (
        "[0, 1] + []",
        "[-1]",
        "[1e3]",
        f"[{2**20}]",
        "[0x1]",
        "",
        "[" + "0," * 10 + "[0]]",
        [True],
        5,
    ):
        with pytest.raises(Refused):
            canonical_ranks(bad, "r")
    import torch.distributed.flight_recorder.components.builder  # noqa: F401 - imported before eval is watched

    evals: list[Any] = []
    real_eval = builtins.eval
    monkeypatch.setattr(builtins, "eval", lambda *a, **k: evals.append(a) or real_eval(*a, **k))
    dumps = {
        0: checked_dump(dump(entries=[entry(1), entry(2, state="scheduled")])),
        1: checked_dump(dump(entries=[entry(1)])),
    }
    found, trouble = disagreements(dumps)
    assert trouble is None and [(d.op, d.seq, d.missing) for d in found] == [("all_reduce", 2, (1,))]
    assert evals == []


def test_plain_data_only_and_no_memo_bomb(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self) -> tuple:
            return (os.system, (f"touch {tmp_path / 'ran'}",))

    refused = {
        "a global": pickle.dumps(Evil()),
        "a set": pickle.dumps(dump(extra_set={1, 2})),
        "an int key (its hash can be made to collide)": pickle.dumps({1: 2, "entries": []}),
        "a tuple key": pickle.dumps({(1,): 2}),
    }
    for what, raw in refused.items():
        with pytest.raises(pickle.UnpicklingError, match=r"plain data only|keys are strings"):
            unpickle(raw)
        assert not (tmp_path / "ran").exists(), what
    # LONG_BINPUT with index 2**31-1: the C unpickler sizes its memo by it (16 GiB); 2**27 took 2 GB and 3.4 s
    tracemalloc.start()
    try:
        start = time.monotonic()
        assert unpickle(b"\x80\x04]r\xff\xff\xff\x7f.") == []
        # its memo sized by the index: 16 GiB, minutes
        assert tracemalloc.get_traced_memory()[1] < 10 * 2**20 and time.monotonic() - start < GENEROUS_S
    finally:
        tracemalloc.stop()


def shared(levels: int, fan: int = 2) -> list:
    value: list = []
    for _ in range(levels):
        value = [value] * fan
    return value


@pytest.mark.parametrize("where", ["entries", "input_sizes", "frames"])
def test_a_pickle_bomb_of_shared_references_is_refused_quickly(tmp_path: Path, where: str) -> None:
    """A few hundred bytes that are 2**40 values once walked: the walk counts each value it reaches."""
    bomb = shared(40)
    data = dump(entries=bomb) if where == "entries" else dump(entries=[{**entry(1), where: bomb}])
    raw = pickle.dumps(data)
    assert len(raw) < 1500
    write(tmp_path / "dumps", "rank_0", raw)
    start = time.monotonic()
    dumps, problems = load_dir(tmp_path / "dumps")
    # walked: 2**40 values, forever
    assert dumps == {} and "rank_0: refused:" in problems[0] and time.monotonic() - start < GENEROUS_S


def deep_list(depth: int) -> bytes:
    """A list nested `depth` deep, built by the unpickler without recursion (pickle.dumps would recurse)."""
    return b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (deep_list(200_000), "no entries"),
        ({"entries": [1, 2]}, "entry 0 is 1, not a recorder entry"),
        (dump(entries=[{**entry(1), "process_group": "0"}]), "entry 0 process_group is '0', not a list"),
        (dump(entries=[{**entry(1), "process_group": ["0"]}]), "not [name, description]"),
        (dump(entries=[{**entry(1), "input_sizes": "[[4]]"}]), "entry 0 input_sizes is '[[4]]', not a list"),
        (dump(entries=[{**entry(1), "input_sizes": [[2**70]]}]), "not a 64-bit integer"),
        (
            dump(entries=[{**entry(1), "collective_seq_id": "1"}]),
            "entry 0 collective_seq_id is '1', not a 64-bit",
        ),
        (dump(entries=[{**entry(1), "profiling_name": 5}]), "entry 0 profiling_name is 5, not a string"),
        (
            dump(entries=[{**entry(1), "frames": [nested(200)]}]),
            "entry 0 frames holds [[[...]]], not a frame",
        ),
        (dump(entries=[{**entry(1), "retired": "yes"}]), "entry 0 retired is 'yes', not true or false"),
        ({**dump(), "pg_config": [1]}, "pg_config is [1], not a table"),
        ({**dump(), "version": "2.10.1"}, "version is '2.10.1', not major.minor"),
        ({**dump(), "entries": [entry(1)] * 20_001}, "not a list of at most 20,000 items"),
    ],
)
def test_a_dump_of_the_wrong_shape_is_refused_with_a_line(tmp_path: Path, data: Any, needle: str) -> None:
    raw = data if isinstance(data, bytes) else pickle.dumps(data)
    write(tmp_path / "dumps", "rank_3", raw)
    dumps, problems = load_dir(tmp_path / "dumps")
    assert dumps == {} and len(problems) == 1 and needle in problems[0] and "\n" not in problems[0], problems


def test_what_is_not_a_dump_is_skipped_with_a_line_unread(tmp_path: Path) -> None:
    folder = tmp_path / "dumps"
    write(folder, "rank_0", dump(entries=[entry(1)]))
    with (folder / "core.12345").open("wb") as handle:
        handle.truncate(2 * 2**30)  # a 2 GB core file: sparse, so the test costs nothing
    (folder / "rank_1").symlink_to("/etc/hostname")
    os.mkfifo(folder / "rank_2")  # opened, it would wait for a writer forever
    (folder / "train.log.1").write_text("not a pickle\n")
    (folder / "rank_99999999").write_bytes(pickle.dumps(dump()))
    start = time.monotonic()
    dumps, problems = load_dir(folder)
    assert sorted(dumps) == [0] and time.monotonic() - start < GENEROUS_S  # the FIFO opened: forever
    assert sorted(problems) == [
        "core.12345: skipped: 2.0 GiB, more than the 64 MiB a dump may have",
        "rank_1: skipped: a symlink (not followed)",
        "rank_99999999: skipped: rank 99999999 is beyond the 1,048,576 a job can have",
        "train.log.1: not a Flight Recorder dump (not a pickle)",
    ]


def test_a_real_dump_still_reads_and_only_checked_fields_go_on(tmp_path: Path) -> None:
    raw = {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
        "pg_status": {"0": {}},
        "comm_lib_version": "",
        "entries": [entry(1), entry(2, state="scheduled")],
        "source": "ds-doctor thin record",
    }
    write(tmp_path / "dumps", "rank_0", raw)
    dumps, problems = load_dir(tmp_path / "dumps")
    assert problems == [] and set(dumps[0]) == {"version", "pg_config", "entries", "source"}
    assert dumps[0]["entries"][1]["process_group"] == ("0", "default_pg")
    (where,) = positions(dumps[0])
    assert (where.group, where.last_completed, where.op, where.seq) == ("0:default_pg", 1, "all_reduce", 2)


def test_the_analyzer_runs_under_a_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many groups and entries make torch's analyzer take minutes (1000 groups x 2000 entries x 8 ranks: 32 s)."""
    monkeypatch.setattr(flight, "ANALYZER_SECONDS", 1.0)
    groups = {str(g): {"name": str(g), "desc": "d", "ranks": "[0, 1, 2, 3]"} for g in range(300)}
    dumps = {
        rank: checked_dump(
            {
                "version": "2.10",
                "pg_config": groups,
                "entries": [
                    {**entry(i // 300 + rank * 7919, group=str(i % 300)), "record_id": i} for i in range(3000)
                ],
            }
        )
        for rank in range(4)
    }
    start = time.monotonic()
    _, trouble = disagreements(dumps)
    assert trouble == "torch's Flight Recorder analyzer did not finish in 1 s (12,000 entries of 4 ranks)"
    assert time.monotonic() - start < GENEROUS_S  # the limit not applied: minutes


def test_a_dump_folder_nested_deeper_than_the_recursion_limit_is_walked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Python 3.11's os.walk recurses: a folder nested 1,100 deep was a RecursionError, exit 3. Walked with a stack of
    its own, the dump at the bottom is read, and so is one beside it at the top."""
    folder = tmp_path / "dumps"
    write(folder, "rank_0", dump(entries=[entry(1)]))
    deep = folder
    for _ in range(1100):  # one level at a time: os.makedirs recurses too
        deep = deep / "d"
        deep.mkdir()
    write(deep, "rank_1", dump(entries=[entry(1), entry(2, state="scheduled")]))
    dumps, problems = load_dir(folder)
    assert sorted(dumps) == [0, 1] and problems == []
    assert main(["triage", str(folder)]) != 3
    assert "internal error" not in capsys.readouterr().err
    (deep / "rank_1").unlink()
    while deep != folder:  # bottom up, as shutil.rmtree (recursive on 3.11) would not get through it
        deep.rmdir()
        deep = deep.parent

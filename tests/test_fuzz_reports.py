"""A report that lies about its types never breaks a reader: forged report JSON (wrong types inside the typed
sections, integers beyond any float, NaN and Infinity, control characters in names, times with and without a zone,
deep nesting, node records of junk shapes) through every reader (`report` with its JSON, Markdown, HTML, `--junit`
and `--prometheus`; `diff` both ways; `fleet` beside a good report; a `run --baseline`'s diff and Prometheus ratios)
ends in a rendered value (exit 0 or 1) or one line naming the file, and the field where a typed field was forged
(exit 2): never exit 3, never a traceback. A run directory's manifest, which `report DIR` rebuilds a report from, is
forged the same way.

A fixed list of mutants (about 190) of one report built as `run` builds it from recorded NVML readings, kernel logs
and sysfs trees, each run in this process through `ds_doctor.cli.main`, whose mapping of exceptions to exit codes is
what is under test: no randomness, no subprocess."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from ds_doctor.checks.baseline import diff_reports
from ds_doctor.cli import main
from ds_doctor.reports.prometheus import render_prometheus
from ds_doctor.run.recover import InputError, load_report_file
from tests.hardware.test_noderecords import SICK, log, records
from tests.reports.fleet_samples import node
from tests.reports.samples import a_failed_case, a_user_config_case, an_equivalence_case

DEEP = 10_000  # past Python's recursion limit and orjson's 1,024 levels
HUGE = 10**400  # valid JSON, an int in Python, beyond any float: float(HUGE) raises OverflowError
CONTROLS = "node\x1b[31m\x00\x07\r\n\u202eevil\u2066\x7f"
DEEP_MARK = "__deep__"
ABSENT = object()  # the field deleted


@functools.cache
def base_json() -> str:
    """A node's report as `run` writes it, with every typed section filled: GPUs read by NVML, a failed case with
    evidence and ranks, the equivalence family's steps, a user's config, a second node, a stop and the node's fault
    records as a sick node has them."""
    report = node("node-a", results=(a_failed_case(), an_equivalence_case(), a_user_config_case())).to_dict()
    report["hardware"]["node_records"] = records(SICK, log("sick_dmesg.txt"), "diag_r1_fail.json")
    report["nodes"] = [
        {"node": 0, "host": "node-a", "env": report["env"], "hardware": report["hardware"]},
        {"node": 1, "host": "node-b"},
    ]
    report["stopped"] = {"signal": "SIGTERM", "finished": 3, "planned": 4}
    return json.dumps(report)


@functools.cache
def base_v1_json() -> str:
    """The same report as schema version 1 wrote it, which ds-doctor still reads: each result's measures and its
    series (as `sizes`) in its notes."""
    data = json.loads(base_json())
    data["schema_version"] = 1
    for result in data["results"]:
        result["notes"] = {**result.pop("measures"), "sizes": result.pop("series"), **result["notes"]}
    return json.dumps(data)


@functools.cache
def good_json() -> str:
    """Another node's good report: the other side of each diff, the readable node of each fleet."""
    return node("node-good").to_json()


def _result(data: dict[str, Any], probe: str) -> int:
    return next(i for i, r in enumerate(data["results"]) if r["probe"] == probe)


def _resolve(data: dict[str, Any], path: tuple[Any, ...]) -> list[Any]:
    """`path` with `("results", "<probe>")` turned into that probe's first result's index."""
    steps = list(path)
    if len(steps) > 1 and steps[0] == "results" and isinstance(steps[1], str):
        steps[1] = _result(data, steps[1])
    return steps


def forge(path: tuple[Any, ...], value: Any, version: int = 2) -> str:
    """The base report (of schema `version`) with `value` at `path` (a dict key is added where it is missing;
    `ABSENT` deletes it), as JSON text; a `DEEP_MARK` value becomes `DEEP` nested lists, written as text (the encoder
    would recurse into them)."""
    data = json.loads(base_json() if version == 2 else base_v1_json())
    steps = _resolve(data, path)
    holder = data
    for step in steps[:-1]:
        holder = holder[step]
    if value is ABSENT:
        del holder[steps[-1]]
    else:
        holder[steps[-1]] = copy.deepcopy(value)
    text = json.dumps(data)
    return text.replace(json.dumps(DEEP_MARK), "[" * DEEP + "]" * DEEP)


NUMBERS = {  # a number belongs here
    "duration": ("results", "comm", "duration_s"),
    "measure": ("results", "comm", "measures", "busbw_gbps"),
    "world size": ("results", "comm", "world_size"),
    "result level": ("results", "comm", "level"),
    "result nodes": ("results", "comm", "nodes"),
    "series": ("results", "comm", "series"),
    "exit code": ("results", "zero_offload", "ranks", 1, "exit_code"),
    "finding rank": ("results", "zero_offload", "findings", 0, "rank"),
    "numel": ("results", "zero_offload", "device_map", 0, "numel"),
    "shape": ("results", "zero_offload", "device_map", 0, "shape"),
    "summary count": ("summary", "pass"),
    "cpus": ("hardware", "cpus"),
    "memory": ("hardware", "memory_bytes"),
    "gpu memory": ("hardware", "gpus", 0, "memory_total_bytes"),
    "gpu temperature": ("hardware", "gpus", 0, "temperature_c"),
    "gpu power": ("hardware", "gpus", 0, "power_draw_w"),
    "gpu index": ("hardware", "gpus", 0, "index"),
    "gpu clock": ("hardware", "gpus", 0, "clock_sm_mhz"),
    "stop count": ("stopped", "finished"),
    "node number": ("nodes", 1, "node"),
    "level": ("level",),
}
TEXTS = {  # text belongs here
    "host": ("hardware", "host"),
    "case": ("results", "comm", "case"),
    "probe": ("results", "comm", "probe"),
    "reason": ("results", "zero_offload", "reason"),
    "finding message": ("results", "zero_offload", "findings", 0, "message"),
    "finding invariant": ("results", "zero_offload", "findings", 0, "invariant"),
    "issue id": ("results", "zero_offload", "known_issue", "id"),
    "issue title": ("results", "zero_offload", "known_issue", "title"),
    "rank stderr": ("results", "zero_offload", "ranks", 1, "stderr_tail"),
    "gpu name": ("hardware", "gpus", 0, "name"),
    "gpu uuid": ("hardware", "gpus", 0, "uuid"),
    "gpu reason": ("hardware", "gpus_reason"),
    "python": ("env", "python"),
    "package version": ("env", "packages", "torch"),
    "cuda": ("env", "cuda"),
    "driver": ("env", "driver"),
    "variable": ("env", "variables", "NCCL_IB_HCA"),
    "tool version": ("tool", "version"),
    "command": ("command", 0),
    "node host": ("nodes", 1, "host"),
    "stop signal": ("stopped", "signal"),
}
WRONG_FOR_NUMBER = {"units": "12 ms", "numeric text": "12", "bool": True, "list": [1], "object": {"v": 1}}
WRONG_FOR_TEXT = {"number": 12, "float": 1.5, "bool": True, "list": ["x"], "object": {"x": "y"}}
BEYOND = {"huge": HUGE, "minus huge": -HUGE, "nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}

TIMES = {
    "naive": "2026-11-28T10:00:00",
    "offset": "2026-11-28T10:00:00+00:00",
    "zulu": "2026-11-28T10:00:00Z",
    "other zone": "2026-11-28T10:00:00+05:30",
    "date only": "2026-11-28",
    "nonsense": "yesterday at ten",
    "out of range": "2026-13-45T99:99:99Z",
    "number": 1764324000,
    "huge": HUGE,
    "null": None,
}

NODE_RECORDS: dict[str, Any] = {
    "text": "sick",
    "list": [1, 2],
    "record text": {"xid": "read"},
    "state unknown": {"xid": {"state": "broken", "reason": None}},
    "state number": {"aer": {"state": 1}},
    "events text": {"xid": {"state": "read", "reason": None, "events": "many"}},
    "event junk": {
        "xid": {"state": "read", "reason": None, "events": [{"xid": [], "pci": {}, "count": "2"}, 7]}
    },
    "huge count": {
        "xid": {"state": "read", "reason": None, "events": [{"xid": 79, "pci": "x", "count": HUGE}]}
    },
    "aer junk": {
        "aer": {
            "state": "read",
            "reason": None,
            "devices": [{"bdf": ["x"], "fatal": HUGE, "correctable": "3"}],
        }
    },
    "aer nan": {
        "aer": {"state": "read", "reason": None, "devices": [{"bdf": "0000:3b:00.0", "fatal": float("nan")}]}
    },
    "ib junk": {"ib": {"state": "read", "reason": None, "ports": [{"device": {}, "port": [], "state": 4}]}},
    "dcgm junk": {"dcgm": {"state": "read", "reason": None, "tests": [{"status": 3, "warnings": "w"}]}},
    "deep": {"xid": {"state": "read", "reason": None, "events": DEEP_MARK}},
}


#: Shapes no typed field names one by one: absent fields, nested sections, junk beside the typed fields.
SHAPES: dict[str, tuple[tuple[Any, ...], Any, bool]] = {
    "gpu index absent": (("hardware", "gpus", 0, "index"), ABSENT, True),
    "host absent": (("hardware", "host"), ABSENT, True),
    "duration absent": (("results", "comm", "duration_s"), ABSENT, True),
    "a node's gpu name": (("nodes", 0, "hardware", "gpus", 0, "name"), 12, True),
    "a node's package": (("nodes", 0, "env", "packages", "torch"), ["2.5"], True),
    "gpu extra field": (("hardware", "gpus", 0, "future"), {"nested": [1, HUGE, None]}, False),
    "env extra field": (("env", "future"), HUGE, False),
    "version skew junk": (("env", "version_skew"), [{"package": 1, "version": [], "requires": {}}], True),
    "throttle reasons junk": (("hardware", "gpus", 0, "throttle_reasons"), [1, None], True),
    "nvlink junk": (("hardware", "gpus", 0, "nvlink"), [{"link": "a", "active": "yes"}], True),
    "gpu unavailable junk": (("hardware", "gpus", 0, "unavailable"), {"name": 3}, True),
    "rank stages junk": (
        ("results", "zero_offload", "ranks", 1, "stages"),
        [{"stage": 1, "start_s": "x"}],
        True,
    ),
    "rank collectives junk": (("results", "zero_offload", "ranks", 1, "collectives"), [{"group": []}], True),
    "rank outcome junk": (("results", "zero_offload", "ranks", 1, "outcome"), "exploded", True),
    "finding data junk": (
        ("results", "equivalence", "findings", 0, "data"),
        {"step": HUGE, "quantity": [], "relative_error": "x", "stage": {}},
        False,
    ),
    "shown note huge": (("results", "comm", "notes"), {"model": HUGE, "x": CONTROLS}, False),
    "equivalence steps junk": (
        ("results", "equivalence", "notes", "equivalence", "steps"),
        [
            {"loss": {"route": HUGE, "reference": "x"}},
            3,
            {"grad_norm": {"route": 1e308, "reference": -1e308}},
        ],
        False,
    ),
    "user config junk": (
        ("results", "zero_offload", "notes"),
        {"user_config": {"filled": [1], "changed": 3, "path": {}, "left_to_deepspeed": 5}},
        False,
    ),
    "model note junk": (("results", "comm", "notes"), {"model": {"x": 1}, "accelerate_config": []}, False),
    "stack name junk": (("stacks",), [{"name": 3, "packages": {}}], True),
    "stop beyond plan": (("stopped",), {"signal": None, "finished": 9, "planned": 2}, False),
    "nodes twice": (("nodes", 1, "node"), 0, False),
    "result on an unknown node": (("results", "comm", "node"), 7, False),
    "measure name: control characters": (("results", "comm", "measures", CONTROLS), 1.0, False),
    "package name: control characters": (("env", "packages", CONTROLS), "1.0", False),
    "series row: huge": (("results", "comm", "series"), [{"bytes": HUGE, "busbw_gbps": 1.0}], True),
    "notes: deep": (("results", "comm", "notes"), DEEP_MARK, False),
    "finding data: deep": (("results", "zero_offload", "findings", 0, "data"), DEEP_MARK, False),
    "hardware extra: deep": (("hardware", "extra_field"), DEEP_MARK, False),
}
#: A version-1 report keeps its measures and series in its notes, which no schema types: they are read as numbers
#: or left out, and the sections both versions share are typed alike.
V1: dict[str, tuple[tuple[Any, ...], Any, bool]] = {
    "v1 measure: huge": (("results", "comm", "notes", "busbw_gbps"), HUGE, False),
    "v1 measure: bool": (("results", "comm", "notes", "busbw_gbps"), True, False),
    "v1 measure: units": (("results", "comm", "notes", "busbw_gbps"), "12 GB/s", False),
    "v1 sizes: huge": (("results", "comm", "notes", "sizes"), [{"bytes": HUGE, "busbw_gbps": "x"}, 3], False),
    "v1 sizes: text": (("results", "comm", "notes", "sizes"), "many", False),
    "v1 gpu memory: units": (("hardware", "gpus", 0, "memory_total_bytes"), "80 GiB", True),
    "v1 host: number": (("hardware", "host"), 12, True),
    "v1 duration: huge": (("results", "comm", "duration_s"), HUGE, True),
    "v1 rank stderr: number": (("results", "zero_offload", "ranks", 1, "stderr_tail"), 12, True),
    "v1 started_at: naive": (("started_at",), TIMES["naive"], True),
    "v1 started_at: nonsense": (("started_at",), TIMES["nonsense"], True),
    "v1 node records: huge count": (("hardware", "node_records"), NODE_RECORDS["huge count"], True),
}


def mutants() -> list[tuple[str, int, tuple[Any, ...], Any, bool]]:
    """(name, schema version, where, what, typed): `typed` where the field has a type the report's schema holds it
    to, so a refusal must name it."""
    out = []
    # each field a string with units (or a number, where text belongs) and an integer beyond any float, and one more
    # wrong value in turn: every wrong value meets several fields, and the file keeps to its budget
    numbers, texts = {**WRONG_FOR_NUMBER, **BEYOND}, dict(WRONG_FOR_TEXT)
    others = [kind for kind in numbers if kind not in ("units", "huge")]
    for i, (field, path) in enumerate(NUMBERS.items()):
        for kind in ("units", "huge", others[i % len(others)]):
            out.append((f"{field}: {kind}", 2, path, numbers[kind], True))
    others = [kind for kind in texts if kind != "number"]
    for i, (field, path) in enumerate(TEXTS.items()):
        for kind in ("number", others[i % len(others)]):
            out.append((f"{field}: {kind}", 2, path, texts[kind], True))
        out.append((f"{field}: control characters", 2, path, CONTROLS, False))
    for kind, value in TIMES.items():
        out.append((f"started_at: {kind}", 2, ("started_at",), value, True))
    out.append(("finished_at: naive", 2, ("finished_at",), TIMES["naive"], True))
    for kind, value in NODE_RECORDS.items():
        out.append((f"node records: {kind}", 2, ("hardware", "node_records"), value, kind != "deep"))
    out += [(name, 2, *shape) for name, shape in SHAPES.items()]
    out += [(name, 1, *shape) for name, shape in V1.items()]
    return out


MUTANTS = mutants()


def check(code: int, err: str, args: list[str], forged: Path, field: list[str], typed: bool) -> None:
    """A rendered value (0, 1), or one line of usage error naming the file and, for a typed field, the field (the
    section that lacks it, and its name, for a field left out)."""
    assert code in (0, 1, 2), (args, code, err[-800:])
    assert "Traceback" not in err and "internal error" not in err, (args, err[-2000:])
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ds-doctor: error:"), (args, err[-2000:])
        assert forged.name in lines[0], (args, lines[0])
        if typed:
            assert all(name in lines[0] for name in field), (args, field, lines[0])


def run(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(("name", "version", "where", "value", "typed"), MUTANTS, ids=[m[0] for m in MUTANTS])
def test_a_forged_report_is_refused_in_one_line_or_rendered(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    name: str,
    version: int,
    where: tuple[Any, ...],
    value: Any,
    typed: bool,
) -> None:
    forged, good = tmp_path / "ds-doctor-node-x-20261121T120000Z.json", tmp_path / "good.json"
    forged.write_text(forge(where, value, version))
    good.write_text(good_json())
    # where a refusal points: the path as the schema names it, to the field or into it
    steps = [str(step) for step in _resolve(json.loads(base_json()), where)]
    field = (
        [f"at {'/'.join(steps)}"] if value is not ABSENT else [f"at {'/'.join(steps[:-1])}", repr(steps[-1])]
    )
    out = tmp_path / "out"
    out.mkdir()
    readers = [
        [
            "report",
            str(forged),
            "--out",
            str(out),
            "--junit",
            str(out / "j.xml"),
            "--prometheus",
            str(out / "p.prom"),
        ],
        ["diff", str(good), str(forged)],
        ["diff", str(forged), str(good)],
    ]
    for args in readers:
        code, err = run(capsys, args)
        check(code, err, args, forged, field, typed)
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / forged.name).write_text(forged.read_text())
    (fleet / "ds-doctor-node-good-20261121T120000Z.json").write_text(good_json())
    code, err = run(capsys, ["fleet", str(fleet), "--json"])
    assert code in (0, 1), (name, code, err[-2000:])  # the good node is always there
    assert "Traceback" not in err and "internal error" not in err, (name, err[-2000:])
    assert all(forged.name in line for line in err.strip().splitlines() if "unreadable" in line)
    try:  # `run --baseline` with the forged report as the baseline: its diff and Prometheus ratios
        baseline = load_report_file(forged, summary=True)
    except InputError:
        return
    current = load_report_file(good, summary=True)
    render_prometheus(current, baseline)
    diff_reports(baseline, current)


#: A run directory's manifest (what `report DIR` rebuilds a report from) forged as a report is: (where, what, the
#: path of the rebuilt report a refusal names, or None where a rendered value is right too).
MANIFEST: dict[str, tuple[tuple[Any, ...], Any, str | None]] = {
    "gpu memory with units": (
        ("hardware", "gpus"),
        [{"index": 0, "memory_total_bytes": "80 GiB"}],
        "hardware/gpus/0",
    ),
    "memory beyond any float": (("hardware", "memory_bytes"), HUGE, "hardware/memory_bytes"),
    "host a number": (("hardware", "host"), 12, "hardware/host"),
    "Xid count beyond any float": (
        ("hardware", "node_records"),
        NODE_RECORDS["huge count"],
        "hardware/node_records/xid/events/0/count",
    ),
    "package version a number": (("env", "packages", "torch"), 3, "env/packages/torch"),
    "argv of numbers": (("argv",), [1, 2], None),
    "started without a zone": (("started_at",), TIMES["naive"], None),
    "started at nonsense": (("started_at",), TIMES["nonsense"], None),
    "host with control characters": (("hardware", "host"), CONTROLS, None),
    "hardware deep": (("hardware", "extra_field"), DEEP_MARK, None),
}


@pytest.mark.parametrize(("where", "value", "field"), MANIFEST.values(), ids=list(MANIFEST))
def test_a_forged_manifest_is_refused_in_one_line_or_rendered(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: tuple[Any, ...], value: Any, field: str | None
) -> None:
    from tests.run.test_recover import a_run_dir

    run_dir = a_run_dir(tmp_path)
    data = json.loads(run_dir.manifest.read_text())
    holder = data
    for step in where[:-1]:
        holder = holder[step]
    holder[where[-1]] = copy.deepcopy(value)
    run_dir.manifest.write_text(json.dumps(data).replace(json.dumps(DEEP_MARK), "[" * DEEP + "]" * DEEP))
    out = tmp_path / "out"
    out.mkdir()
    args = ["report", str(run_dir.path), "--out", str(out), "--junit", str(out / "j.xml")]
    code, err = run(capsys, [*args, "--prometheus", str(out / "p.prom")])
    assert code in (0, 1, 2), (code, err[-800:])
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]
    said = [line for line in err.strip().splitlines() if not line.startswith("ds-doctor: warning:")]
    if code == 2:
        assert len(said) == 1 and said[0].startswith("ds-doctor: error:") and str(run_dir.path) in said[0], (
            said
        )
    if field is not None:
        assert code == 2 and f"at {field}" in said[0], said

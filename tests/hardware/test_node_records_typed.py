"""The node's fault records as types (ds_doctor.reports.noderecords), the reader of each source over the one
bounded-read helper (ds_doctor.hardware.bounded) and the builder (ds_doctor.hardware.records.build_node_records):
the JSON the types write is the schema's `node_records`, key for key, for the recorded nodes of
tests/resources/noderecords; a report's JSON of any shape reads back as a record, never an exception; and each
source's hostile output (empty, binary, 10 MB, JSON of another shape, a command that hangs, a reader that raises) is
an `unavailable` record with its reason, which the checks make a `skip` and Prometheus leaves out. Fast: fakes for
commands, one real flood."""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from ds_doctor.checks.noderecords import node_record_results
from ds_doctor.hardware.bounded import CommandOutput, run_bounded
from ds_doctor.hardware.dcgm import DCGM_BYTES, parse_dcgm, read_dcgm
from ds_doctor.hardware.records import build_node_records, read_node_records
from ds_doctor.hardware.xid import read_xids
from ds_doctor.reports.model import Outcome, load_schema
from ds_doctor.reports.noderecords import (
    AerDevice,
    AerRecord,
    DcgmRecord,
    DcgmTest,
    IbPort,
    IbRecord,
    NodeRecords,
    SourceState,
    XidEvent,
    XidRecord,
)
from ds_doctor.reports.sections import HardwareSection

RES = Path(__file__).resolve().parents[1] / "resources" / "noderecords"
HEALTHY, SICK = RES / "sysfs" / "healthy", RES / "sysfs" / "sick"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the records are Linux's")

DCGMI = "/usr/bin/dcgmi"


def answering(dmesg: CommandOutput | None = None, dcgmi: CommandOutput | None = None) -> Any:
    """A runner: `dmesg --kernel` and `dcgmi diag` answer as given, every other command is not found."""

    def runner(argv: Sequence[str], timeout_s: float, max_bytes: int) -> CommandOutput:
        if list(argv[:2]) == ["dmesg", "--kernel"] and dmesg is not None:
            return dmesg
        if argv[0] == DCGMI and dcgmi is not None:
            return dcgmi
        return CommandOutput(None, error=f"{argv[0]}: not found")

    return runner


def which(name: str) -> str | None:
    return DCGMI if name == "dcgmi" else None


def recorded(root: Path, kernel_log: str, dcgm: str) -> NodeRecords:
    """A recorded node's records, built as a run builds them."""
    dmesg = CommandOutput(0, (RES / "kernel_log" / kernel_log).read_bytes())
    dcgmi = CommandOutput(0, (RES / "dcgm" / dcgm).read_bytes())
    return build_node_records(root, answering(dmesg, dcgmi), which)


SCHEMA = load_schema()
NODE_RECORDS_SCHEMA = jsonschema.Draft202012Validator(
    {"$defs": SCHEMA["$defs"], "$ref": "#/$defs/node_records"}
)

RECORDED = [
    (HEALTHY, "healthy_dmesg.txt", "diag_r1_pass.json"),
    (SICK, "sick_dmesg.txt", "diag_r1_fail.json"),
    (SICK, "sick_journalctl.txt", "diag_r1_dcgm3_fail.json"),
    (SICK, "sick_dmesg.txt", "diag_r1_runtime_error.json"),
]


# ---- the types and the schema's JSON -----------------------------------------------------------------------------


def test_the_states_are_the_schemas_enum_for_every_source() -> None:
    sources = SCHEMA["$defs"]["node_records"]["properties"]
    assert set(sources) == {"xid", "aer", "ib", "dcgm"}
    for source in sources.values():
        assert source["properties"]["state"]["enum"] == [s.value for s in SourceState]


@linux_only
@pytest.mark.parametrize(
    ("root", "kernel_log", "dcgm"), RECORDED, ids=[f"{r.name}-{d}" for r, _, d in RECORDED]
)
def test_a_recorded_nodes_records_are_the_schemas_json_and_read_back_the_same(
    root: Path, kernel_log: str, dcgm: str
) -> None:
    records = recorded(root, kernel_log, dcgm)
    written = records.to_dict()
    NODE_RECORDS_SCHEMA.validate(written)
    text = json.dumps(written)
    back = NodeRecords.from_dict(json.loads(text))
    assert back == records and json.dumps(back.to_dict()) == text  # the same keys, in the same order


@linux_only
def test_the_sick_node_reads_as_types() -> None:
    records = recorded(SICK, "sick_dmesg.txt", "diag_r1_fail.json")
    assert records.xid is not None and records.xid.state is SourceState.READ
    fell = next(e for e in records.xid.events if e.xid == 79)
    assert (fell.pci, fell.count, fell.first_at, fell.last_at) == (
        "0000:9b:00",
        2,
        "8812.442125",
        "8812.561201",
    )
    assert records.xid.driver_gpus == ("0000:3b:00", "0000:9b:00")
    assert records.aer is not None
    port = next(d for d in records.aer.devices if d.bdf == "0000:3a:00.0")
    assert (port.fatal, port.total("fatal"), port.counts["fatal"]) == (1, 1, {"SDES": 1})
    assert records.ib is not None
    assert [(p.device, p.is_up()) for p in records.ib.ports] == [
        ("mlx5_0", True),
        ("mlx5_1", False),
        ("mlx5_2", True),
    ]
    assert records.dcgm is not None and (records.dcgm.returncode, records.dcgm.answered) == (0, True)
    assert [(t.entity, t.status, t.error_ids) for t in records.dcgm.tests if t.status != "Pass"] == [
        ("GPU 1", "Fail", (85,)),
        ("GPU 2", "Warn", (29,)),
    ]


def test_each_record_writes_only_its_state_and_reason_unless_read() -> None:
    assert XidRecord(SourceState.ABSENT, "no driver").to_dict() == {"state": "absent", "reason": "no driver"}
    assert AerRecord(SourceState.UNAVAILABLE, "no sysfs").to_dict() == {
        "state": "unavailable",
        "reason": "no sysfs",
    }
    assert IbRecord(SourceState.ABSENT, "no port").to_dict() == {"state": "absent", "reason": "no port"}
    # dcgmi answered JSON that says it could not run: its exit status is kept beside the reason
    said = DcgmRecord(SourceState.UNAVAILABLE, "dcgmi diag: Error", returncode=0, answered=True)
    assert said.to_dict() == {"state": "unavailable", "reason": "dcgmi diag: Error", "returncode": 0}
    assert DcgmRecord.from_dict(said.to_dict()) == said


def test_entries_round_trip_with_every_field() -> None:
    event = XidEvent(48, "0000:3b:00", "GPU-I:01", "python3", "DBE", 3, "1.0", "2.0", "DBE again")
    device = AerDevice(
        "0000:3b:00.0", "nvidia gpu", "0x10de", "0x030200", {"fatal": "x"}, {"nonfatal": {"A": 1}}
    )
    port = IbPort("mlx5_0", 1, 4, "ACTIVE", 5, "LinkUp", "400 Gb/sec (4X NDR)", 400.0, "InfiniBand", {"a": 0})
    test = DcgmTest("Deployment", "software", "GPU 0", "Fail", ("w",), (85,), ("i",))
    for entry in (event, device, port, test):
        assert type(entry).from_dict(json.loads(json.dumps(entry.to_dict()))) == entry
    assert device.to_dict()["class"] == "0x030200"


# ---- a report's JSON of any shape --------------------------------------------------------------------------------

WRONG_RECORDS: dict[str, tuple[object, str]] = {
    "text": ("read", "the record is not an object but str"),
    "list": ([1], "the record is not an object but list"),
    "state unknown": ({"state": "skip"}, "its state 'skip' is none of read, absent, unavailable"),
    "state a list": ({"state": ["read"]}, "its state list is none of read, absent, unavailable"),
    "state missing": ({"reason": "x"}, "its state None is none of read, absent, unavailable"),
    "read without entries": ({"state": "read"}, "a read record whose {list} is missing"),
    "entries a number": (
        {"state": "read", "events": 5, "devices": 5, "ports": 5, "tests": 5},
        "whose {list} is 5",
    ),
    "entries deep": (
        {"state": "read", "events": {}, "devices": {}, "ports": {}, "tests": {}},
        "whose {list} is dict",
    ),
}
LISTS = {XidRecord: "events", AerRecord: "devices", IbRecord: "ports", DcgmRecord: "tests"}


@pytest.mark.parametrize(("value", "said"), WRONG_RECORDS.values(), ids=list(WRONG_RECORDS))
@pytest.mark.parametrize("kind", list(LISTS), ids=[k.__name__ for k in LISTS])
def test_a_record_of_a_wrong_shape_is_unavailable_with_the_reason(
    kind: type[XidRecord | AerRecord | IbRecord | DcgmRecord], value: object, said: str
) -> None:
    record = kind.from_dict(value)
    assert record.state is SourceState.UNAVAILABLE
    assert record.reason is not None and said.format(list=LISTS[kind]) in record.reason


def test_entries_of_a_wrong_shape_are_left_out_and_fields_of_a_wrong_type_are_none() -> None:
    huge = 10**400
    records = NodeRecords.from_dict(
        {
            "xid": {
                "state": "read",
                "events": [7, "x", {"xid": "79", "pci": 1, "count": True}, {"count": huge}],
            },
            "aer": {
                "state": "read",
                "devices": [{"bdf": ["x"], "fatal": "3", "counts": {"fatal": {"A": "1"}}}],
            },
            "ib": {
                "state": "read",
                "ports": [{"device": {}, "port": [], "rate_gbps": float("nan"), "counters": []}],
            },
            "dcgm": {
                "state": "read",
                "tests": [{"status": 3, "warnings": "w", "error_ids": [True, 85, None]}],
            },
            "future": {"state": "read"},
        }
    )
    assert records.xid is not None and records.xid.events == (
        XidEvent(None, None, count=None),
        XidEvent(None, None, count=huge),
    )
    assert records.aer is not None and records.aer.devices == (AerDevice(None, None, counts={"fatal": {}}),)
    assert records.ib is not None and records.ib.ports == (IbPort(None, None),)
    assert records.dcgm is not None and records.dcgm.tests == (DcgmTest("", "", error_ids=(85,)),)
    assert [name for name, _ in records.sources()] == [
        "xid",
        "aer",
        "ib",
        "dcgm",
    ]  # a newer writer's: not read
    assert NodeRecords.of(["not", "records"]) is None and NodeRecords.of(None) is None


def test_the_hardware_section_reads_its_records_once_and_writes_its_json_back_unchanged() -> None:
    written = {
        "host": "n",
        "node_records": {"dcgm": {"state": "read", "tests": "junk"}, "xid": {"state": "absent"}},
    }
    section = HardwareSection.from_dict(written)
    assert section.to_dict() == written
    records = section.node_records
    assert records is not None and records is section.node_records  # read once
    assert records.xid == XidRecord(SourceState.ABSENT)
    assert records.dcgm == DcgmRecord(SourceState.UNAVAILABLE, "a read record whose tests is 'junk'")
    assert HardwareSection.from_dict({"host": "old"}).node_records is None


# ---- each source's hostile output --------------------------------------------------------------------------------

#: dcgmi's JSON in shapes it never prints; the first three raised in the reader before the types (exit 3, no report)
DCGM_SHAPES: dict[str, tuple[bytes, str]] = {
    "categories a number": (b'{"DCGM Diagnostic": {"test_categories": 5}}', "no list of test_categories"),
    "tests a number": (b'{"DCGM Diagnostic": {"test_categories": [{"tests": 5}]}}', ""),
    "results a number": (b'{"DCGM Diagnostic": {"test_categories": [{"tests": [{"results": 3}]}]}}', ""),
    "no categories": (b'{"DCGM Diagnostic": {"version": "4.2.3"}}', "no list of test_categories"),
    "root a list": (b'{"DCGM Diagnostic": [1, 2]}', "has none of DCGM Diagnostic, DCGM GPU Diagnostic"),
    "another tool": (b'{"nvidia-smi": {}}', "has none of DCGM Diagnostic, DCGM GPU Diagnostic"),
    "an array": (b"[1, 2, 3]", "printed no JSON: [1, 2, 3]"),
    "a scalar": (b"42", "printed no JSON: 42"),
    "an integer of 5,000 digits": (
        b'{"DCGM Diagnostic": {"version": ' + b"9" * 5000 + b"}}",
        "printed no JSON",
    ),
    "deep": (b'{"a":' + b"[" * 50_000 + b"]" * 50_000 + b"}", "printed no JSON"),
    "cut short": (b'{"DCGM Diagnostic": {"test_categories": [', "printed no JSON"),
    "empty": (b"", "printed no JSON: exit status 0"),
    "binary": (bytes(range(256)) * 64, "printed no JSON"),
}


@linux_only
@pytest.mark.parametrize(("stdout", "said"), DCGM_SHAPES.values(), ids=list(DCGM_SHAPES))
def test_dcgmis_output_of_any_shape_is_a_record_never_a_raise(stdout: bytes, said: str) -> None:
    record = read_dcgm(answering(dcgmi=CommandOutput(0, stdout)), which)
    NODE_RECORDS_SCHEMA.validate({"dcgm": record.to_dict()})
    if said:
        assert record.state is SourceState.UNAVAILABLE and said in (record.reason or ""), record
    else:  # inner entries of a wrong shape are left out: the diagnostic ran no test this reader knows
        assert record.state is SourceState.READ and record.tests == ()


@linux_only
def test_a_dcgmi_that_hangs_or_floods_is_unavailable() -> None:
    hung = read_dcgm(answering(dcgmi=CommandOutput(None, b'{"DCGM', timed_out=True)), which, timeout_s=0.2)
    assert hung == DcgmRecord(SourceState.UNAVAILABLE, "dcgmi diag -r 1 -j did not finish in 0.2 s")

    def floods(argv: Sequence[str], timeout_s: float, max_bytes: int) -> CommandOutput:
        return run_bounded(["head", "-c", str(10 << 20), "/dev/zero"], timeout_s, max_bytes)  # 10 MB

    flood = read_dcgm(floods, which)
    assert flood == DcgmRecord(
        SourceState.UNAVAILABLE, f"dcgmi diag -r 1 -j printed more than {DCGM_BYTES} bytes"
    )


def test_parse_dcgm_takes_any_json_value() -> None:
    for value in (None, 1, "x", [], {"DCGM Diagnostic": {"runtime_error": ["a"]}}):
        assert parse_dcgm(value).state is SourceState.UNAVAILABLE


@linux_only
@pytest.mark.parametrize(
    ("dmesg", "state"),
    [
        (CommandOutput(0, b""), SourceState.UNAVAILABLE),
        (CommandOutput(0, bytes(range(256)) * 64), SourceState.READ),  # a log with no Xid
        (CommandOutput(None, b"", timed_out=True), SourceState.UNAVAILABLE),
        (CommandOutput(None, b"NVRM: Xid (PCI:0000:3b:00): 79, " * 1000, truncated=True), SourceState.READ),
    ],
    ids=["empty", "binary", "hangs", "flood kept in part"],
)
def test_the_kernel_log_of_any_shape_is_a_record(dmesg: CommandOutput, state: SourceState) -> None:
    record = read_xids(SICK, answering(dmesg=dmesg), timeout_s=0.2)
    assert record.state is state
    NODE_RECORDS_SCHEMA.validate({"xid": record.to_dict()})


@linux_only
def test_a_reader_that_raises_makes_its_record_unavailable_and_the_others_are_read() -> None:
    def broken(argv: Sequence[str], timeout_s: float, max_bytes: int) -> CommandOutput:
        raise RuntimeError("a runner bug")

    records = build_node_records(SICK, broken, which)
    assert records.xid == XidRecord(
        SourceState.UNAVAILABLE, "the kernel log (Xid) reader failed: RuntimeError: a runner bug"
    )
    assert records.dcgm == DcgmRecord(
        SourceState.UNAVAILABLE, "the DCGM reader failed: RuntimeError: a runner bug"
    )
    assert records.aer is not None and records.aer.state is SourceState.READ
    assert records.ib is not None and records.ib.state is SourceState.READ
    NODE_RECORDS_SCHEMA.validate(read_node_records(SICK, broken, which))


# ---- what the checks and Prometheus make of them -----------------------------------------------------------------


@linux_only
def test_a_wrong_shaped_dcgmi_answer_skips_its_result_and_the_run_goes_on() -> None:
    shape = DCGM_SHAPES["categories a number"][0]
    dmesg = CommandOutput(0, (RES / "kernel_log" / "sick_dmesg.txt").read_bytes())
    hardware = {"node_records": read_node_records(SICK, answering(dmesg, CommandOutput(0, shape)), which)}
    results = {r.case: r for r in node_record_results(hardware)}
    dcgm = results["node_records[dcgm]"]
    assert dcgm.outcome == Outcome.SKIP and "no list of test_categories" in (dcgm.reason or "")
    assert dcgm.notes == {"returncode": 0}
    assert results["node_records[xid]"].outcome == Outcome.FAIL  # the other records are judged as ever


@linux_only
def test_a_report_whose_records_are_of_a_wrong_shape_is_rendered() -> None:
    from ds_doctor.reports.prometheus import render_prometheus
    from ds_doctor.run.build import build_report

    records = {**recorded(SICK, "sick_dmesg.txt", "diag_r1_fail.json").to_dict(), "dcgm": [1]}
    records["xid"] = {"state": "read", "events": "many"}
    hardware = {"host": "h", "cpus": 2, "memory_bytes": 1 << 30, "gpus": [], "node_records": records}
    at = dt.datetime(2026, 3, 3, tzinfo=dt.timezone.utc)
    report = build_report(
        started=at,
        finished=at,
        level=1,
        argv=("run",),
        env={"python": "3.11", "packages": {}},
        hardware=hardware,
        results=node_record_results(hardware),
        run_dir=None,
    )
    assert [r.outcome for r in report.results] == [Outcome.SKIP, Outcome.FAIL, Outcome.FAIL, Outcome.SKIP]
    text = render_prometheus(report)
    assert (
        "ds_doctor_xid_total" not in text
        and 'ds_doctor_aer_errors{host="h",kind="fatal",pci="0000:3a:00.0"} 1.0' in text
    )

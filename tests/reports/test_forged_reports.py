"""The reports that lied about their types and broke their readers (exit 3), each now refused at the boundary in one
line naming the file and the field, or read and shown as the value it is; and the pieces behind that: the typed
sections of the schema (GPU readings, ranks, the node's fault records), times with and without a zone, integers
beyond any float, a version-1 report's untyped measures, and Prometheus over node records of any shape."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ds_doctor.cli import main
from ds_doctor.reports.model import Report, load_schema, parse_time, validate
from ds_doctor.reports.prometheus import render_prometheus
from ds_doctor.reports.whatran import what_ran
from ds_doctor.run.recover import InputError, load_report_file
from tests.reports.test_validate import mutated, paths
from tests.test_fuzz_reports import HUGE, base_json, base_v1_json, forge

#: (the field, what was written there, where the schema names it): each made `report`, `diff`, `fleet` or
#: `--prometheus` exit 3, or refused the report without naming the field.
FORGED = {
    "gpu memory with units": (
        ("hardware", "gpus", 0, "memory_total_bytes"),
        "80 GiB",
        "hardware/gpus/0/memory_total_bytes",
    ),
    "rank stderr a number": (
        ("results", "zero_offload", "ranks", 1, "stderr_tail"),
        12,
        "results/3/ranks/1/stderr_tail",
    ),
    "measure beyond any float": (
        ("results", "comm", "measures", "busbw_gbps"),
        HUGE,
        "results/1/measures/busbw_gbps",
    ),
    "memory beyond any float": (("hardware", "memory_bytes"), HUGE, "hardware/memory_bytes"),
    "duration beyond any float": (("results", "comm", "duration_s"), HUGE, "results/1/duration_s"),
    "world size beyond any float": (("results", "comm", "world_size"), HUGE, "results/1/world_size"),
    "Xid count beyond any float": (
        ("hardware", "node_records", "xid", "events", 0, "count"),
        HUGE,
        "hardware/node_records/xid/events/0/count",
    ),
    "AER counter as text": (
        ("hardware", "node_records", "aer", "devices", 0, "fatal"),
        "3",
        "hardware/node_records/aer/devices/0/fatal",
    ),
}


@pytest.mark.parametrize(("where", "value", "field"), FORGED.values(), ids=list(FORGED))
def test_a_forged_typed_field_is_one_line_naming_the_file_and_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: tuple[Any, ...], value: Any, field: str
) -> None:
    path = tmp_path / "forged.json"
    path.write_text(forge(where, value))
    with pytest.raises(InputError) as refused:
        load_report_file(path)
    said = str(refused.value)
    assert said.startswith(f"{path}: not a valid ds-doctor report at {field}: ") and "\n" not in said
    assert len(said) < len(str(path)) + 250  # an integer of hundreds of digits is named by its size
    assert main(["report", str(path), "--out", str(tmp_path), "--prometheus", str(tmp_path / "p.prom")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{path}: not a valid ds-doctor report at {field}" in line


def test_an_integer_beyond_any_float_is_named_by_its_size() -> None:
    data = json.loads(forge(("hardware", "memory_bytes"), HUGE))
    with pytest.raises(jsonschema.ValidationError) as refused:
        validate(data)
    assert list(refused.value.absolute_path) == ["hardware", "memory_bytes"]
    assert refused.value.message.startswith("an integer of 1,329 bits is greater than the maximum")


def test_times_with_and_without_a_zone_read_as_utc_and_subtract() -> None:
    naive, zulu = parse_time("2026-11-28T10:00:00"), parse_time("2026-11-28T10:30:00Z")
    assert naive.tzinfo is not None and naive.utcoffset() == dt.timedelta(0)
    assert (zulu - naive).total_seconds() == 1800
    assert parse_time("2026-11-28T11:00:00+01:00") == naive


def test_a_report_started_without_a_zone_and_finished_with_one_is_rendered(tmp_path: Path) -> None:
    path = tmp_path / "naive.json"
    path.write_text(forge(("started_at",), "2026-11-21T12:00:00"))
    report = load_report_file(path)
    families = {f.name: f for f in text_string_to_metric_families(render_prometheus(report))}
    (duration,) = families["ds_doctor_run_duration_seconds"].samples
    assert duration.value == 240  # the node sample runs four minutes from 12:00 UTC


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2026-11-28", "'2026-11-28' is not a time"),  # a date, not a time
        ("yesterday at ten", "'yesterday at ten' is not a time"),
        ("2026-13-45T99:99:99Z", "'2026-13-45T99:99:99Z' is not a time"),  # a time's shape, no time
    ],
)
def test_a_time_that_is_none_is_one_line_naming_it(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "times.json"
    path.write_text(forge(("finished_at",), text))
    with pytest.raises(InputError) as refused:
        load_report_file(path, summary=True)
    said = (
        f"{path}: not a valid ds-doctor report at finished_at: {message} (ISO 8601, as 2026-11-21T12:00:00Z)"
    )
    assert str(refused.value) == said


def test_node_records_as_the_node_wrote_them_are_valid_and_each_shape_is_typed() -> None:
    data = json.loads(base_json())
    validate(data)  # a sick node's four records, every field filled
    records = data["hardware"]["node_records"]
    assert {record["state"] for record in records.values()} == {"read"}
    for path, value in [
        (("xid", "state"), "broken"),
        (("ib", "ports", 0, "counters", "symbol_error"), -1),
        (("dcgm", "tests", 0, "warnings"), "w"),
        (("aer", "devices"), {"bdf": "0000:3b:00.0"}),
    ]:
        with pytest.raises(jsonschema.ValidationError) as refused:
            validate(json.loads(forge(("hardware", "node_records", *path), value)))
        assert list(refused.value.absolute_path) == ["hardware", "node_records", *path]


def test_a_version_1_report_reads_numbers_from_its_notes_and_leaves_out_the_rest(tmp_path: Path) -> None:
    data = json.loads(base_v1_json())
    comm = next(r for r in data["results"] if r["probe"] == "comm")
    comm["notes"].update(busbw_gbps=HUGE, algbw_gbps=True, sizes=[{"bytes": HUGE, "busbw_gbps": 2.5}])
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(data))
    report = load_report_file(path)
    (read,) = [r for r in report.results if r.probe == "comm"]
    assert read.measures == {} and read.series == ({"busbw_gbps": 2.5},)
    assert main(["report", str(path), "--out", str(tmp_path), "--prometheus", str(tmp_path / "p.prom")]) == 1


def test_a_version_1_report_has_its_sections_typed_as_version_2(tmp_path: Path) -> None:
    data = json.loads(base_v1_json())
    data["hardware"]["gpus"][0]["memory_total_bytes"] = "80 GiB"
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="at hardware/gpus/0/memory_total_bytes: '80 GiB' is not of type"):
        load_report_file(path)


def test_prometheus_skips_node_records_of_a_wrong_shape_and_keeps_the_rest() -> None:
    """A report made in this process is never checked against the schema: each record of a wrong shape is left out
    of the metrics, never a crash."""
    data = json.loads(base_json())
    records = data["hardware"]["node_records"]
    records["xid"]["events"] += [{"xid": 79, "pci": "x", "count": HUGE}, {"count": "2"}, {"count": True}, 7]
    records["aer"]["devices"] += [{"bdf": ["x"], "fatal": HUGE, "correctable": "3", "nonfatal": None}, "junk"]
    records["ib"]["ports"] = "many"
    records["dcgm"] = [1]
    report = Report.from_dict(data)
    families = {f.name: f for f in text_string_to_metric_families(render_prometheus(report))}
    xids = {(s.labels["pci"], s.labels["xid"]): s.value for s in families["ds_doctor_xid_total"].samples}
    assert xids[("0000:9b:00", "79")] == 2 and len(xids) == 5  # the sick node's five, none of the junk
    aer = families["ds_doctor_aer_errors"].samples
    assert len(aer) == 3 * 8 and "ds_doctor_ib_port_up" not in families


def test_a_user_config_note_of_a_wrong_shape_is_shown_as_far_as_it_goes() -> None:
    data = json.loads(base_json())
    note = {"path": "/ds.json", "sha256": "0", "filled": [1], "changed": 3, "left_to_deepspeed": 5}
    next(r for r in data["results"] if r["probe"] == "zero_offload")["notes"] = {"user_config": note}
    ran = what_ran(Report.from_dict(data))
    assert ran.deepspeed is not None and ran.deepspeed.path == "/ds.json"
    assert (ran.deepspeed.filled, ran.deepspeed.changed, ran.deepspeed.left_to_deepspeed) == ({}, {}, ())


def test_the_compiled_schema_and_jsonschema_agree_on_the_typed_hardware_section() -> None:
    """The GPU readings and node records, every field given every wrong type: the compiled schema (what `validate`
    tries first, and trusts when it passes) refuses what `jsonschema` refuses, as tests/reports/test_validate.py holds
    them for the rest of a report."""
    import fastjsonschema

    schema = load_schema()
    section = {"$defs": schema["$defs"], "$ref": "#/$defs/hardware"}
    compiled = fastjsonschema.compile(section, use_formats=False)
    reference = jsonschema.validators.validator_for(schema)(section)
    hardware = json.loads(base_json())["hardware"]
    for port in hardware["node_records"]["ib"]["ports"]:  # two counters stand for the twenty of a port
        port["counters"] = dict(list(port["counters"].items())[:2])
    checked = rejected = 0
    for path in paths(hardware):
        for value in (None, True, -1, 1.5, "x", [1], {"a": 1}, HUGE, KeyError):
            candidate = mutated(hardware, path, value)
            expected = reference.is_valid(candidate)
            try:
                compiled(candidate)
            except fastjsonschema.JsonSchemaException:
                assert not expected, (path, value)
            else:
                assert expected, (path, value)
            checked += 1
            rejected += not expected
    assert checked > 1_000 and rejected > checked // 2, (checked, rejected)

"""A report's sections are types that round-trip to the JSON the schema describes, and every field the NVML reader
writes is a typed field (a renamed one fails here, not as a silent `n/a` in a ticket)."""

from __future__ import annotations

import dataclasses

import pytest

from ds_doctor.hardware.env import collect_environment
from ds_doctor.hardware.nvml import read_gpus
from ds_doctor.reports.model import Report, validate
from ds_doctor.reports.sections import EnvSection, GpuReading, HardwareSection, NodeSection, StackSection
from tests.checks.test_baseline import report
from tests.hardware.test_nvml import AnsweringNVML, answers

RECORDINGS = ("h100_node_sick.json", "h100_x1_firecracker.json", "t4_container.json")


@pytest.mark.parametrize("recording", RECORDINGS)
def test_every_field_the_nvml_reader_writes_is_typed_and_round_trips(recording: str) -> None:
    gpus, _, _ = read_gpus(AnsweringNVML(answers(recording)))
    assert gpus
    for raw in gpus:
        reading = GpuReading.from_dict(raw)
        assert reading.extra == {}, (
            f"the reader writes fields GpuReading does not know: {sorted(reading.extra)}"
        )
        assert reading.to_dict() == raw


def test_a_gpu_nvml_could_not_open_writes_back_its_two_keys() -> None:
    raw = {"index": 3, "unavailable": {"handle": "NVMLError_GpuIsLost"}}
    assert GpuReading.from_dict(raw).to_dict() == raw and GpuReading.from_dict(raw).name is None


def test_this_machines_environment_round_trips_and_a_newer_writers_keys_are_kept() -> None:
    env, hardware = collect_environment()
    assert EnvSection.from_dict(env).to_dict() == env
    assert HardwareSection.from_dict(hardware).to_dict() == hardware
    newer = {**env, "container": "docker"}
    assert EnvSection.from_dict(newer).extra == {"container": "docker"}
    assert EnvSection.from_dict(newer).to_dict() == newer
    sparse = {
        "python": "3.11.7",
        "packages": {"torch": "2.13.0"},
    }  # an older report's env: no more keys written
    assert EnvSection.from_dict(sparse).to_dict() == sparse


def test_nodes_and_stacks_round_trip_and_are_read_by_attribute() -> None:
    env, hardware = collect_environment()
    node = {"node": 1, "host": "gpu-b", "env": env, "hardware": hardware}
    said_nothing = {"node": 2, "host": "gpu-c"}
    stack = {
        "name": "deepspeed-0.16.4",
        "with": ["deepspeed==0.16.4"],
        "packages": {"deepspeed": "0.16.4"},
        "path": "/cache/x",
        "ignored_pins": ["torch<2.0"],
    }
    installed = {"name": "installed", "with": [], "packages": {"deepspeed": "0.19.8"}, "path": None}
    for cls, data in (
        (NodeSection, node),
        (NodeSection, said_nothing),
        (StackSection, stack),
        (StackSection, installed),
    ):
        assert cls.from_dict(data).to_dict() == data
    assert NodeSection.from_dict(node).hardware.host == hardware["host"]
    assert StackSection.from_dict(stack).releases == ("deepspeed==0.16.4",)


def test_a_report_holds_typed_sections_whatever_it_was_given_and_its_json_validates() -> None:
    built = report([])
    assert isinstance(built.env, EnvSection) and isinstance(built.hardware, HardwareSection)
    assert built.hardware.gpus and isinstance(built.hardware.gpus[0], GpuReading)
    validate(built.to_dict())
    again = Report.from_dict(built.to_dict())
    assert again.to_dict() == built.to_dict() and again.hardware.gpus[0].name == built.hardware.gpus[0].name
    same = dataclasses.replace(built, env=built.env.to_dict())  # a dict handed over is typed on the way in
    assert same.env == built.env

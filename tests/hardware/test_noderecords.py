"""The node's own fault records: the readers (ds_doctor.hardware.records) over recorded kernel logs, fake sysfs trees
and dcgmi JSON in their real formats (tests/resources/noderecords/README.md says where each came from), the rules
and results over them (ds_doctor.checks.noderecords), what Prometheus gets, and hostile input: a huge file, binary
bytes, a FIFO where a file should be, a command that hangs or floods."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ds_doctor.checks.noderecords import (
    Node,
    aer_rising,
    aer_uncorrectable,
    dcgm_failed_tests,
    ib_link_errors,
    ib_port_down,
    ib_rate_below_peers,
    node_record_results,
    xid_events,
)
from ds_doctor.hardware.records import (
    CommandOutput,
    parse_aer,
    parse_dcgm,
    parse_xid_log,
    pci_key,
    read_aer,
    read_dcgm,
    read_ib,
    read_node_records,
    read_text,
    read_xids,
    run_bounded,
)
from ds_doctor.reports.model import Outcome, Severity
from ds_doctor.reports.noderecords import SourceState, XidRecord
from ds_doctor.reports.prometheus import render_prometheus
from ds_doctor.run.build import build_report
from ds_doctor.run.plan import run_node_checks
from tests.bounds import GENEROUS_S, PLANTED_HANG_S
from tests.reports.test_alert_rules import needs_promtool, promtool

RES = Path(__file__).resolve().parents[1] / "resources" / "noderecords"
HEALTHY, SICK = RES / "sysfs" / "healthy", RES / "sysfs" / "sick"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the records are Linux's")
pytestmark = linux_only


def log(name: str) -> bytes:
    return (RES / "kernel_log" / name).read_bytes()


class Commands:
    """A runner that answers each command from a table (argv[0] and its first argument) and records the calls."""

    def __init__(self, answers: dict[str, CommandOutput]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float, max_bytes: int) -> CommandOutput:
        self.calls.append(tuple(argv))
        key = " ".join(argv[:2])
        for prefix, answer in self.answers.items():
            if key.startswith(prefix):
                return answer
        return CommandOutput(None, error=f"{argv[0]}: not found")


def ok(stdout: bytes) -> CommandOutput:
    return CommandOutput(0, stdout)


DMESG_REFUSED = CommandOutput(1, b"", b"dmesg: read kernel buffer failed: Operation not permitted\n")


def dcgm_runner(path: Path) -> Commands:
    return Commands({"/usr/bin/dcgmi diag": CommandOutput(0, path.read_bytes())})


def which_dcgmi(name: str) -> str | None:
    return "/usr/bin/dcgmi" if name == "dcgmi" else None


def records(root: Path, kernel_log: bytes, dcgm: str | None = None) -> dict[str, Any]:
    """Every record of a recorded node, as the hardware section carries them."""
    answers = {"dmesg --kernel": ok(kernel_log)}
    if dcgm:
        answers["/usr/bin/dcgmi diag"] = CommandOutput(0, (RES / "dcgm" / dcgm).read_bytes())
    which = which_dcgmi if dcgm else (lambda name: None)
    return read_node_records(root, Commands(answers), which)


GPU_3B = {
    "index": 3,
    "pci_bus_id": "00000000:3B:00.0",
    "remapped_rows_pending": True,
    "retired_pages_pending": False,
}


def by_rule(findings: Sequence[Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for finding in findings:
        out.setdefault(finding.invariant, []).append(finding)
    return out


# ---- Xid ---------------------------------------------------------------------------------------------------------


def test_a_healthy_kernel_log_has_no_xid() -> None:
    runner = Commands({"dmesg --kernel": ok(log("healthy_dmesg.txt"))})
    record = read_xids(HEALTHY, runner).to_dict()
    assert record == {
        "state": "read",
        "reason": None,
        "source": "dmesg --kernel",
        "partial": None,
        "events": [],
        "left_out": 0,
    }
    assert runner.calls == [("dmesg", "--kernel")]


def test_the_sick_kernel_log_gives_each_gpu_and_xid_with_its_count() -> None:
    record = read_xids(SICK, Commands({"dmesg --kernel": ok(log("sick_dmesg.txt"))})).to_dict()
    events = {(e["pci"], e["xid"]): e for e in record["events"]}
    assert list(events) == [
        ("0000:3b:00", 13),
        ("0000:3b:00", 48),
        ("0000:3b:00", 63),
        ("0000:3b:00", 45),
        ("0000:9b:00", 79),
    ]
    fell = events[("0000:9b:00", 79)]
    assert fell["count"] == 2 and fell["message"] == "GPU has fallen off the bus."
    assert (fell["first_at"], fell["last_at"], fell["process"]) == ("8812.442125", "8812.561201", "<unknown>")
    assert events[("0000:3b:00", 13)]["count"] == 2 and events[("0000:3b:00", 13)]["process"] == "python3"
    assert events[("0000:3b:00", 63)]["message"].startswith("Row Remapper: New row marked for remapping")
    json.dumps(record)  # JSON-safe: it goes into the hardware section


def test_where_dmesg_is_restricted_the_journal_is_read() -> None:
    runner = Commands({"dmesg": DMESG_REFUSED, "journalctl -k": ok(log("sick_journalctl.txt"))})
    record = read_xids(SICK, runner).to_dict()
    assert record["source"].startswith("journalctl -k -b -n 100000")
    assert [c[0] for c in runner.calls] == ["dmesg", "dmesg", "journalctl"]
    mig = next(e for e in record["events"] if e["xid"] == 94)
    assert (mig["pci"], mig["mig"], mig["first_at"]) == (
        "0000:3b:00",
        "GPU-I:01 GPU-CI:00",
        "Mar 03 10:40:30",
    )
    assert mig["message"] == "Contained: SM (0x1). RST: No, D-RST: No"


def test_no_readable_log_is_unavailable_with_each_reason() -> None:
    record = read_xids(SICK, Commands({"dmesg": DMESG_REFUSED, "journalctl -k": ok(b"")})).to_dict()
    assert record["state"] == "unavailable" and "events" not in record
    assert "Operation not permitted" in record["reason"]
    assert "journalctl -k -b -n 100000 --no-pager -q: no kernel message visible" in record["reason"]


def test_without_nvidias_driver_there_is_no_xid_to_read(tmp_path: Path) -> None:
    runner = Commands({})
    record = read_xids(tmp_path, runner).to_dict()
    assert record["state"] == "absent" and "/proc/driver/nvidia" in record["reason"]
    assert runner.calls == []  # no command run on a node without the driver


def test_older_driver_lines_without_pci_or_name_are_read() -> None:
    events, left_out = parse_xid_log(
        "[ 966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000\n"
        "NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.\n"
    )
    assert [(e.pci, e.xid, e.process) for e in events] == [("0000:01:00", 31, None), ("0000:10:1c", 63, None)]
    assert events[1].message == "Row Remapper: New row marked for remapping, reset gpu to activate."
    assert left_out == 0


def test_pci_addresses_from_nvml_and_the_driver_meet() -> None:
    assert pci_key("00000000:3B:00.0") == pci_key("0000:3b:00") == "0000:3b:00"
    assert pci_key("garbage") is None and pci_key(None) is None


def test_xid_rules_name_the_gpu_and_what_each_xid_means() -> None:
    events = read_xids(SICK, Commands({"dmesg --kernel": ok(log("sick_dmesg.txt"))}))
    rules = by_rule(xid_events(events, Node.of({"gpus": [GPU_3B]})))
    (fell,) = rules["xid_79"]
    assert fell.severity == Severity.ERROR and fell.data == {"pci": "0000:9b:00", "xid": 79, "count": 2}
    assert fell.message.startswith("GPU at PCI 0000:9b:00: Xid 79 (GPU has fallen off the bus), 2 time(s)")
    (dbe,) = rules["xid_48"]
    assert dbe.severity == Severity.ERROR and dbe.message.startswith(
        "GPU 3 (0000:3b:00): Xid 48 (double-bit ECC"
    )
    assert "reboot" in dbe.remedy and "until the next boot" in dbe.remedy
    assert rules["xid_63"][0].severity == Severity.ERROR  # NVML: the remap is still pending
    assert rules["xid_13"][0].severity == Severity.WARNING and "job's own fault" in rules["xid_13"][0].remedy
    assert rules["xid_45"][0].severity == Severity.INFO


def test_a_remap_applied_since_makes_its_xid_a_warning() -> None:
    events = read_xids(SICK, Commands({"dmesg --kernel": ok(log("sick_dmesg.txt"))}))
    reset = {**GPU_3B, "remapped_rows_pending": False}
    rules = by_rule(xid_events(events, Node.of({"gpus": [reset]})))
    assert rules["xid_63"][0].severity == Severity.WARNING and "was reset since" in rules["xid_63"][0].message
    assert rules["xid_48"][0].severity == Severity.ERROR  # a DBE stays an error until the node reboots


def test_an_xid_not_in_the_table_is_a_warning() -> None:
    events, _ = parse_xid_log("NVRM: Xid (PCI:0000:3b:00): 154, pid=1, name=x, GPU recovery action changed\n")
    (finding,) = xid_events(XidRecord(SourceState.READ, events=tuple(events)), Node())
    assert finding.severity == Severity.WARNING and "not in ds-doctor's table" in finding.message


# ---- AER ---------------------------------------------------------------------------------------------------------


def test_aer_is_read_for_gpus_rdma_nics_and_the_ports_above_them() -> None:
    record = read_aer(HEALTHY)
    roles = {d.bdf: d.role for d in record.devices}
    assert roles == {
        "0000:3a:00.0": "port above 0000:3b:00.0",
        "0000:3a:02.0": "port above 0000:3c:00.0",
        "0000:3a:03.0": "port above 0000:3d:00.0",
        "0000:3b:00.0": "nvidia gpu",
        "0000:3c:00.0": "rdma nic",
        "0000:3d:00.0": "rdma nic",
        "0000:5d:01.0": "port above 0000:5e:00.0",
        "0000:5e:00.0": "rdma nic",
    }  # not the management NIC 0000:00:1f.6 (its fatal error is no training job's), not the NVMe drive
    assert all((d.correctable, d.nonfatal, d.fatal) == (0, 0, 0) for d in record.devices)
    assert aer_uncorrectable(record, Node()) == []


def test_aer_files_in_the_kernels_format_and_the_older_long_names() -> None:
    assert parse_aer((SICK / "sys/devices/pci0000:3a/0000:3a:00.0/aer_dev_fatal").read_text()) == (
        1,
        {"SDES": 1},
    )
    older = "Receiver Error 2\nBad TLP 0\nRELAY_NUM Rollover 0\nTOTAL_ERR_COR 2\n"
    assert parse_aer(older) == (2, {"Receiver Error": 2})
    assert parse_aer("RxErr 0\ndev_cor_errs_bit[9] 4\nTOTAL_ERR_COR 4\n") == (4, {"dev_cor_errs_bit[9]": 4})


def test_fatal_aer_is_an_error_and_nonfatal_a_warning() -> None:
    findings = by_rule(aer_uncorrectable(read_aer(SICK), Node()))
    (fatal,) = findings["aer_fatal"]
    assert fatal.severity == Severity.ERROR
    assert fatal.message == (
        "0000:3a:00.0 (port above 0000:3b:00.0): 1 fatal uncorrectable PCIe error(s) since boot (SDES 1)"
    )
    (nonfatal,) = findings["aer_nonfatal"]
    assert nonfatal.severity == Severity.WARNING and "(CmpltTO 1)" in nonfatal.message


def test_aer_counts_rising_since_the_baseline_are_a_warning() -> None:
    baseline, now = read_aer(RES / "sysfs/aer_rising/baseline"), read_aer(RES / "sysfs/aer_rising/now")
    rising = aer_rising(now, baseline)
    assert [(f.data["pci"], f.data["before"], f.data["now"]) for f in rising] == [
        ("0000:3a:00.0", 8, 2717),
        ("0000:3b:00.0", 2, 802),
    ]
    assert all(f.severity == Severity.WARNING and f.invariant == "aer_rising" for f in rising)
    assert aer_rising(baseline, now) == []  # lower: the node rebooted, the counters started again
    assert aer_rising(now, None) == [] and aer_rising(now, now) == []


def test_the_baseline_diff_reports_aer_counts_that_rose() -> None:
    """`ds-doctor diff` / `run --baseline`: what rose is a hardware change, reported and not a regression."""
    from ds_doctor.checks.baseline import diff_reports
    from tests.reports.samples import a_report

    def with_aer(aer: dict) -> Any:
        report = a_report([])
        extra = {**report.hardware.extra, "node_records": {"aer": aer}}
        return dataclasses.replace(report, hardware=dataclasses.replace(report.hardware, extra=extra))

    baseline = read_aer(RES / "sysfs/aer_rising/baseline").to_dict()
    now = read_aer(RES / "sysfs/aer_rising/now").to_dict()
    changes = [
        c for c in diff_reports(with_aer(baseline), with_aer(now)).changes if c.subject.startswith("AER")
    ]
    assert [(c.subject, c.before, c.after, c.regression) for c in changes] == [
        ("AER correctable errors of 0000:3a:00.0", 8, 2717, False),
        ("AER correctable errors of 0000:3b:00.0", 2, 802, False),
    ]
    assert not [
        c for c in diff_reports(with_aer(now), with_aer(baseline)).changes if c.subject.startswith("AER")
    ]


def test_the_aer_result_compares_with_a_baseline_reports_hardware_section() -> None:
    baseline = {"node_records": {"aer": read_aer(RES / "sysfs/aer_rising/baseline").to_dict()}}
    hardware = {"node_records": {"aer": read_aer(RES / "sysfs/aer_rising/now").to_dict()}}
    (result,) = node_record_results(hardware, baseline=baseline)
    assert result.outcome == Outcome.PASS and {f.invariant for f in result.findings} == {"aer_rising"}
    (plain,) = node_record_results(hardware)
    assert plain.findings == ()


def test_no_nvidia_or_rdma_device_is_absent_and_no_aer_files_unavailable(tmp_path: Path) -> None:
    nic = tmp_path / "sys/bus/pci/devices/0000:00:1f.6"
    nic.mkdir(parents=True)
    (nic / "vendor").write_text("0x8086\n")
    (nic / "class").write_text("0x020000\n")
    assert read_aer(tmp_path).state == "absent"
    gpu = tmp_path / "sys/bus/pci/devices/0000:3b:00.0"
    gpu.mkdir()
    (gpu / "vendor").write_text("0x10de\n")
    (gpu / "class").write_text("0x030200\n")
    record = read_aer(tmp_path)
    assert record.state == "unavailable" and "no aer_dev_* files" in (record.reason or "")
    assert read_aer(tmp_path / "nowhere").state == "unavailable"


# ---- InfiniBand --------------------------------------------------------------------------------------------------


def test_ib_ports_are_read_from_sysfs() -> None:
    record = read_ib(HEALTHY)
    assert [(p.device, p.port, p.state, p.phys_state, p.rate_gbps) for p in record.ports] == [
        ("mlx5_0", 1, "ACTIVE", "LinkUp", 400.0),
        ("mlx5_1", 1, "ACTIVE", "LinkUp", 400.0),
        ("mlx5_2", 1, "ACTIVE", "LinkUp", 400.0),
    ]
    port = record.ports[0]
    assert (port.state_code, port.phys_state_code, port.link_layer) == (4, 5, "InfiniBand")
    assert port.counters["symbol_error"] == 0 and port.counters["port_xmit_data"] == 9081726354
    node = Node()
    assert (
        ib_port_down(record, node) == ib_link_errors(record, node) == ib_rate_below_peers(record, node) == []
    )


def test_a_port_down_is_an_error_with_why() -> None:
    (down,) = ib_port_down(read_ib(SICK), Node())
    assert down.severity == Severity.ERROR and down.data == {"device": "mlx5_1", "port": 1}
    assert (
        down.message
        == "mlx5_1 port 1 is DOWN / Polling: no link: check the cable, the transceiver and the switch port"
    )


def test_a_port_nccl_ib_hca_leaves_out_is_information_only() -> None:
    record = read_ib(SICK)
    for spec in ("^mlx5_1", "=mlx5_0,mlx5_2", "mlx5_0:1,mlx5_2", "^=mlx5_1:1"):
        node = Node.of({}, {"variables": {"NCCL_IB_HCA": spec}})
        (down,) = ib_port_down(record, node)
        assert down.severity == Severity.INFO and "NCCL_IB_HCA leaves it out" in down.message, spec
    assert (
        ib_port_down(record, Node(nccl_ib_hca="mlx5"))[0].severity == Severity.ERROR
    )  # a prefix: all of them


def test_nccl_ib_hca_matching_follows_nccl() -> None:
    assert Node(nccl_ib_hca="mlx5_1").nccl_uses("mlx5_10", 1)  # a prefix without `=`
    assert not Node(nccl_ib_hca="=mlx5_1").nccl_uses("mlx5_10", 1)
    assert not Node(nccl_ib_hca="mlx5_0:2").nccl_uses("mlx5_0", 1)
    assert Node(nccl_ib_hca="^mlx5_0:2").nccl_uses("mlx5_0", 1)


def test_link_errors_and_a_slow_rail_are_warnings() -> None:
    record = read_ib(SICK)
    (errors,) = ib_link_errors(record, Node())
    assert errors.severity == Severity.WARNING
    assert errors.message == "mlx5_0 port 1: link_downed 3, symbol_error 17, link_error_recovery 2"
    (slow,) = ib_rate_below_peers(record, Node())
    assert slow.severity == Severity.WARNING and slow.data["device"] == "mlx5_2"
    assert slow.message == "mlx5_2 port 1 runs at 200 Gb/sec (4X HDR), the node's other ports at 400 Gb/sec"


def test_an_infiniband_port_idle_since_boot_is_a_warning(tmp_path: Path) -> None:
    """A dual-port HCA's second port, never cabled: no data, no link lost since boot. Not a lost rail."""
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/2"
    (port / "counters").mkdir(parents=True)
    for name, text in (("state", "1: DOWN"), ("phys_state", "2: Polling"), ("rate", "10 Gb/sec (4X SDR)")):
        (port / name).write_text(text + "\n")
    (port / "link_layer").write_text("InfiniBand\n")
    for counter in ("port_rcv_data", "port_xmit_data", "link_downed", "symbol_error"):
        (port / "counters" / counter).write_text("0\n")
    (down,) = ib_port_down(read_ib(tmp_path), Node())
    assert down.severity == Severity.WARNING and "no traffic on it since boot" in down.message
    (port / "counters" / "port_xmit_data").write_text("4096\n")  # it carried data: a rail lost
    (down,) = ib_port_down(read_ib(tmp_path), Node())
    assert down.severity == Severity.ERROR and "no traffic" not in down.message


def test_an_ethernet_port_down_is_a_warning(tmp_path: Path) -> None:
    port = tmp_path / "sys/class/infiniband/mlx5_4/ports/1"
    port.mkdir(parents=True)
    for name, text in (("state", "1: DOWN"), ("phys_state", "3: Disabled"), ("rate", "25 Gb/sec (1X EDR)")):
        (port / name).write_text(text + "\n")
    (port / "link_layer").write_text("Ethernet\n")
    (down,) = ib_port_down(read_ib(tmp_path), Node())
    assert down.severity == Severity.WARNING and "the port is disabled" in down.message


def test_no_rdma_device_is_absent(tmp_path: Path) -> None:
    assert read_ib(tmp_path).to_dict() == {
        "state": "absent",
        "reason": "no RDMA device (no /sys/class/infiniband)",
    }


# ---- DCGM --------------------------------------------------------------------------------------------------------


def test_dcgmi_not_on_path_is_absent_and_runs_nothing() -> None:
    runner = Commands({})
    assert read_dcgm(runner, lambda name: None).to_dict() == {
        "state": "absent",
        "reason": "dcgmi is not on PATH",
    }
    assert runner.calls == []


def test_dcgm_diag_json_is_read_per_gpu() -> None:
    runner = dcgm_runner(RES / "dcgm/diag_r1_fail.json")
    record = read_dcgm(runner, which_dcgmi).to_dict()
    assert runner.calls == [("/usr/bin/dcgmi", "diag", "-r", "1", "-j")]
    assert (record["state"], record["version"], record["returncode"]) == ("read", "4.2.3", 0)
    assert [(t["test"], t["entity"], t["status"]) for t in record["tests"]] == [
        ("software", "GPU 0", "Pass"),
        ("software", "GPU 1", "Fail"),
        ("software", "GPU 2", "Warn"),
        ("software", "GPU 3", "Pass"),
    ]
    assert record["tests"][1]["error_ids"] == [85]


def test_dcgm_failures_are_errors_and_warnings_warnings() -> None:
    rules = by_rule(
        dcgm_failed_tests(read_dcgm(dcgm_runner(RES / "dcgm/diag_r1_fail.json"), which_dcgmi), Node())
    )
    (fail,) = rules["dcgm_fail"]
    assert fail.severity == Severity.ERROR
    assert fail.message == (
        "dcgmi diag -r 1: software (Deployment) Fail on GPU 1: GPU 1 had memory errors and row remappings are pending"
    )
    assert fail.data["error_ids"] == [85]
    assert rules["dcgm_warn"][0].severity == Severity.WARNING and "GPU 2" in rules["dcgm_warn"][0].message
    passing = read_dcgm(dcgm_runner(RES / "dcgm/diag_r1_pass.json"), which_dcgmi)
    assert dcgm_failed_tests(passing, Node()) == []
    (exit_only,) = dcgm_failed_tests(dataclasses.replace(passing, returncode=226), Node())
    assert exit_only.invariant == "dcgm_exit" and exit_only.severity == Severity.WARNING


def test_dcgm3s_json_shape_is_read_too() -> None:
    record = parse_dcgm(json.loads((RES / "dcgm/diag_r1_dcgm3_fail.json").read_text())).to_dict()
    failed = [t for t in record["tests"] if t["status"] == "Fail"]
    assert [(t["test"], t["entity"]) for t in failed] == [("Page Retirement/Row Remap", "GPU 0,1,2,3")]


def test_dcgm_that_cannot_run_is_unavailable_with_its_words() -> None:
    error = read_dcgm(dcgm_runner(RES / "dcgm/diag_r1_runtime_error.json"), which_dcgmi).to_dict()
    assert error["state"] == "unavailable"
    assert (
        error["reason"]
        == "dcgmi diag: Error: unable to establish a connection to the specified host: localhost"
    )
    said = b"Error: unable to establish a connection to the specified host: localhost\n"
    plain = read_dcgm(Commands({"/usr/bin/dcgmi diag": CommandOutput(255, said)}), which_dcgmi).to_dict()
    assert plain["state"] == "unavailable" and plain["reason"].endswith(
        "printed no JSON: " + said.decode().strip()
    )


# ---- the results -------------------------------------------------------------------------------------------------


def test_a_healthy_node_passes_each_record_it_has() -> None:
    hardware = {
        "gpus": [GPU_3B],
        "node_records": records(HEALTHY, log("healthy_dmesg.txt"), "diag_r1_pass.json"),
    }
    results = node_record_results(hardware)
    assert [(r.case, r.outcome, r.findings) for r in results] == [
        ("node_records[xid]", Outcome.PASS, ()),
        ("node_records[aer]", Outcome.PASS, ()),
        ("node_records[ib]", Outcome.PASS, ()),
        ("node_records[dcgm]", Outcome.PASS, ()),
    ]
    assert {(r.probe, r.scenario, r.level) for r in results} == {("node_records", "smoke", 1)}
    assert results[0].notes == {"source": "dmesg --kernel", "left_out": 0, "events": 0}


def test_a_sick_node_fails_each_record_with_an_error() -> None:
    hardware = {"gpus": [GPU_3B], "node_records": records(SICK, log("sick_dmesg.txt"), "diag_r1_fail.json")}
    results = {r.case: r for r in node_record_results(hardware)}
    assert {case: r.outcome for case, r in results.items()} == {
        "node_records[xid]": Outcome.FAIL,
        "node_records[aer]": Outcome.FAIL,
        "node_records[ib]": Outcome.FAIL,
        "node_records[dcgm]": Outcome.FAIL,
    }
    assert "GPU at PCI 0000:9b:00: Xid 79" in (results["node_records[xid]"].reason or "")
    assert "mlx5_1 port 1 is DOWN" in (results["node_records[ib]"].reason or "")


def test_a_record_the_node_lacks_makes_no_result_and_the_others_say_why(tmp_path: Path) -> None:
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)  # no PCI device at all
    hardware = {"node_records": records(tmp_path, b"")}  # no driver, no NVIDIA or RDMA device, no dcgmi
    assert {r["state"] for r in hardware["node_records"].values()} == {"absent"}
    assert node_record_results(hardware) == []
    mixed = {"node_records": {**hardware["node_records"], "ib": read_ib(HEALTHY).to_dict()}}
    (ib,) = node_record_results(mixed)
    assert ib.case == "node_records[ib]" and ib.notes["absent"] == {
        "xid": "NVIDIA's kernel driver is not loaded (no /proc/driver/nvidia): no Xid to read",
        "aer": "no NVIDIA or RDMA PCI device",
        "dcgm": "dcgmi is not on PATH",
    }


def test_a_record_that_could_not_be_read_is_skipped_with_the_reason() -> None:
    xid = read_xids(SICK, Commands({"dmesg": DMESG_REFUSED, "journalctl -k": ok(b"")})).to_dict()
    (result,) = node_record_results({"node_records": {"xid": xid}})
    assert result.outcome == Outcome.SKIP and "Operation not permitted" in (result.reason or "")


def test_an_older_report_without_records_has_no_result() -> None:
    assert node_record_results({"gpus": [GPU_3B]}) == []


def test_node_checks_add_the_records_filtered_by_keyword() -> None:
    hardware = {"node_records": records(SICK, log("sick_dmesg.txt"))}
    env = {"variables": {"NCCL_IB_HCA": "^mlx5_1"}}
    (ib,) = run_node_checks(env, hardware, "node_records and ib")
    assert (
        ib.case == "node_records[ib]" and ib.outcome == Outcome.PASS
    )  # the down port is left out by NCCL_IB_HCA
    assert {r.case for r in run_node_checks(env, hardware, None)} >= {
        "node_records[xid]",
        "node_records[aer]",
    }


# ---- Prometheus --------------------------------------------------------------------------------------------------

NOW = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(days=2)


def node_report(hardware: dict[str, Any], started: dt.datetime = NOW, results: Any = None) -> Any:
    """A level-1 report of a node's records (its own results unless given), finished at `started`."""
    return build_report(
        started=started - dt.timedelta(minutes=5),
        finished=started,
        level=1,
        argv=("run",),
        env={"python": "3.11", "packages": {}},
        hardware={"cpus": 2, "memory_bytes": 1 << 30, "gpus": [], **hardware},
        results=node_record_results(hardware) if results is None else results,
        run_dir=None,
    )


def node_text(host: str, root: Path, kernel_log: bytes, started: dt.datetime = NOW) -> str:
    hardware = {
        "host": host,
        "cpus": 2,
        "memory_bytes": 1 << 30,
        "gpus": [GPU_3B],
        "node_records": records(
            root, kernel_log, "diag_r1_fail.json" if root == SICK else "diag_r1_pass.json"
        ),
    }
    return render_prometheus(node_report(hardware, started))


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted((k, v) for k, v in s.labels.items() if k != "host")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_the_records_are_exported_to_prometheus() -> None:
    text = node_text("gpu-sick", SICK, log("sick_dmesg.txt"))
    xids = samples(text, "ds_doctor_xid_total")
    assert (
        xids[(("pci", "0000:9b:00"), ("xid", "79"))] == 2
        and xids[(("pci", "0000:3b:00"), ("xid", "48"))] == 1
    )
    aer = samples(text, "ds_doctor_aer_errors")
    assert aer[(("kind", "fatal"), ("pci", "0000:3a:00.0"))] == 1
    assert aer[(("kind", "correctable"), ("pci", "0000:3a:00.0"))] == 15
    assert samples(text, "ds_doctor_ib_port_up") == {
        (("device", "mlx5_0"), ("port", "1")): 1.0,
        (("device", "mlx5_1"), ("port", "1")): 0.0,
        (("device", "mlx5_2"), ("port", "1")): 1.0,
    }
    findings = samples(text, "ds_doctor_node_record_finding")
    assert findings[(("record", "xid"), ("rule", "xid_79"), ("severity", "error"))] == 1
    assert findings[(("record", "ib"), ("rule", "ib_port_down"), ("severity", "error"))] == 1
    assert findings[(("record", "dcgm"), ("rule", "dcgm_fail"), ("severity", "error"))] == 1
    healthy = node_text("gpu-ok", HEALTHY, log("healthy_dmesg.txt"))
    assert (
        samples(healthy, "ds_doctor_node_record_finding") == {}
        and samples(healthy, "ds_doctor_xid_total") == {}
    )
    assert set(samples(healthy, "ds_doctor_ib_port_up").values()) == {1.0}


RULES = Path(__file__).resolve().parents[2] / "contrib" / "prometheus" / "ds-doctor-node-records.rules.yml"


def series(texts: Sequence[tuple[str, str]], minutes: int) -> list[dict[str, str]]:
    """Each textfile's samples as promtool input: the first text for the first day, the second after it."""
    out: dict[str, list[float]] = {}
    for day, (host, text) in enumerate(texts):
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = {**s.labels, "instance": f"{host}:9100", "job": "node"}
                key = s.name + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items())) + "}"
                out.setdefault(key, [float("nan")] * day).append(s.value)
    return [
        {"series": key, "values": " ".join(f"{format(v, 'f') if v == v else '_'}x{minutes}" for v in values)}
        for key, values in out.items()
    ]


@needs_promtool
def test_the_node_record_alert_rules_are_valid() -> None:
    proc = promtool("check", "rules", str(RULES), cwd=RES)
    assert proc.returncode == 0 and "SUCCESS: 2 rules found" in proc.stdout, proc.stdout + proc.stderr


@needs_promtool
def test_the_proposed_alerts_fire_on_the_sick_node_only(tmp_path: Path) -> None:
    day = 24 * 60
    now_aer = {
        "node_records": {"aer": read_aer(RES / "sysfs/aer_rising/now").to_dict()},
        "host": "gpu-rising",
    }
    base_aer = {
        "node_records": {"aer": read_aer(RES / "sysfs/aer_rising/baseline").to_dict()},
        "host": "gpu-rising",
    }
    texts = []
    for hardware in (base_aer, now_aer):
        texts.append(("gpu-rising", render_prometheus(node_report(hardware))))
    inputs = series(texts, day)
    inputs += series([("gpu-sick", node_text("gpu-sick", SICK, log("sick_dmesg.txt")))] * 2, day)
    inputs += series([("gpu-ok", node_text("gpu-ok", HEALTHY, log("healthy_dmesg.txt")))] * 2, day)
    sick = {"host": "gpu-sick", "instance": "gpu-sick:9100", "job": "node", "severity": "critical"}
    errors = [("xid", "xid_48"), ("xid", "xid_63"), ("xid", "xid_79"), ("aer", "aer_fatal")]
    errors += [("ib", "ib_port_down"), ("dcgm", "dcgm_fail")]
    rising = {"host": "gpu-rising", "instance": "gpu-rising:9100", "job": "node", "severity": "warning"}
    tests = [
        {
            "alertname": "DsDoctorNodeRecordError",
            "eval_time": f"{day + 30}m",
            "exp_alerts": [{"exp_labels": {**sick, "record": r, "rule": rule}} for r, rule in errors],
        },
        {
            "alertname": "DsDoctorAerCorrectableRising",
            "eval_time": f"{day + 30}m",
            "exp_alerts": [
                {"exp_labels": {**rising, "kind": "correctable", "pci": pci}}
                for pci in ("0000:3a:00.0", "0000:3b:00.0")
            ],
        },
    ]
    rules = yaml.safe_load(RULES.read_text())
    for rule in rules["groups"][0]["rules"]:
        rule.pop("annotations")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules))
    spec = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": inputs, "alert_rule_test": tests}],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(spec, width=1 << 16))
    proc = promtool("test", "rules", "test.yml", cwd=tmp_path)
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-4000:]


# ---- hostile input -----------------------------------------------------------------------------------------------


#: a planted hang, as argv: longer than the generous bound that tells it from the cure (a command killed at its timeout)
SLEEP = f"sleep {PLANTED_HANG_S:g}"


def test_a_hung_command_is_killed_at_its_timeout() -> None:
    started = time.monotonic()
    out = run_bounded(SLEEP.split(), 0.5, 1 << 10)
    assert out.timed_out and out.stdout == b"" and time.monotonic() - started < GENEROUS_S


def test_a_command_whose_child_keeps_the_pipe_open_is_killed_with_it() -> None:
    started = time.monotonic()
    out = run_bounded(["sh", "-c", f"echo started; {SLEEP} & {SLEEP}"], 0.5, 1 << 10)
    assert out.timed_out and out.stdout == b"started\n" and time.monotonic() - started < GENEROUS_S


def running(pid: int) -> bool:
    """Alive and not a zombie (a container's init may leave the dead unreaped)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_a_child_left_holding_the_pipe_after_its_parent_exits_is_killed() -> None:
    out = run_bounded(["sh", "-c", f"{SLEEP} & echo $!"], 0.5, 1 << 10)
    assert out.timed_out
    deadline = time.monotonic() + GENEROUS_S  # left alone, it sleeps past this
    while running(int(out.stdout)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(int(out.stdout))


def test_a_flood_keeps_only_the_last_bytes_and_stops() -> None:
    started = time.monotonic()
    out = run_bounded(["yes", "NVRM: noise"], 30, 1 << 16)
    assert out.truncated and not out.timed_out and len(out.stdout) <= 1 << 16
    assert time.monotonic() - started < GENEROUS_S  # `yes` never stops by itself


def test_a_command_that_is_not_there_is_an_error_not_a_raise() -> None:
    out = run_bounded(["/nonexistent/dmesg"], 1, 1024)
    assert out.returncode is None and out.error and "FileNotFoundError" in out.error


def test_hung_log_commands_leave_the_xid_record_unavailable() -> None:
    def hangs(argv: Sequence[str], timeout_s: float, max_bytes: int) -> CommandOutput:
        return run_bounded(SLEEP.split(), 0.3, max_bytes)

    started = time.monotonic()
    record = read_xids(SICK, hangs, timeout_s=0.3).to_dict()
    assert record["state"] == "unavailable" and record["reason"].count("gave nothing in 0.3 s") == 3
    assert time.monotonic() - started < GENEROUS_S


def test_a_hung_dcgmi_is_unavailable() -> None:
    def hangs(argv: Sequence[str], timeout_s: float, max_bytes: int) -> CommandOutput:
        return run_bounded(SLEEP.split(), 0.3, max_bytes)

    record = read_dcgm(hangs, which_dcgmi, timeout_s=0.3).to_dict()
    assert record == {"state": "unavailable", "reason": "dcgmi diag -r 1 -j did not finish in 0.3 s"}


def test_a_partial_log_is_read_and_said_so() -> None:
    cut = CommandOutput(None, log("sick_dmesg.txt"), timed_out=True, truncated=True)
    record = read_xids(SICK, Commands({"dmesg --kernel": cut})).to_dict()
    assert (
        record["state"] == "read"
        and record["partial"].startswith("only its last")
        and len(record["events"]) == 5
    )


def test_a_huge_kernel_log_is_parsed_in_bounded_time() -> None:
    noise = b"[  1.000000] pcieport 0000:3a:00.0: AER: enabled with IRQ 36\n" * 250_000  # 16 MB
    huge = (
        noise
        + b"x" * 5_000_000
        + b"NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=a, lost\n"
        + log("sick_dmesg.txt")
    )
    started = time.monotonic()
    events, _ = parse_xid_log(huge.decode())
    assert {(e.pci, e.xid) for e in events} >= {("0000:9b:00", 79), ("0000:3b:00", 48)}
    assert time.monotonic() - started < GENEROUS_S  # a regex backtracking over 21 MB: hours


def test_too_many_xid_groups_are_counted_not_kept() -> None:
    text = "".join(
        f"NVRM: Xid (PCI:0000:{i % 256:02x}:00): {i // 256 + 1}, pid=1, name=a, x\n" for i in range(3000)
    )
    events, left_out = parse_xid_log(text)
    assert len(events) == 256 and left_out == 3000 - 256


def test_binary_bytes_in_the_log_and_in_sysfs_do_not_break_the_readers(tmp_path: Path) -> None:
    garbage = bytes(range(256)) * 64
    record = read_xids(
        SICK, Commands({"dmesg --kernel": ok(garbage + log("sick_dmesg.txt") + garbage)})
    ).to_dict()
    assert len(record["events"]) == 5
    shutil.copytree(HEALTHY, tmp_path / "node", symlinks=True)
    port = tmp_path / "node/sys/class/infiniband/mlx5_0/ports/1"
    (port / "state").write_bytes(garbage)
    (port / "counters/symbol_error").write_bytes(b"\xff\xfe\x00\x01")
    aer = tmp_path / "node/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/aer_dev_fatal"
    aer.write_bytes(garbage)
    ports = read_ib(tmp_path / "node").to_dict()["ports"]
    assert ports[0]["state"] != "ACTIVE" and "counters/symbol_error" in ports[0]["unreadable"]
    gpu = next(d for d in read_aer(tmp_path / "node").to_dict()["devices"] if d["bdf"] == "0000:3b:00.0")
    assert gpu["fatal"] is None and gpu["unreadable"] == {"fatal": "no TOTAL_ERR_* line"}
    assert parse_aer("RxErr ²\nTOTAL_ERR_COR 99999999999999999999999\n") == (None, {})
    json.dumps(read_node_records(tmp_path / "node", Commands({}), lambda name: None))


def test_a_huge_sysfs_file_is_read_only_to_its_bound(tmp_path: Path) -> None:
    shutil.copytree(HEALTHY, tmp_path / "node", symlinks=True)
    aer = tmp_path / "node/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0/aer_dev_correctable"
    with aer.open("r+b") as f:
        f.truncate(1 << 30)  # 1 GiB, sparse
    assert len(read_text(aer)) <= 64 << 10
    started = time.monotonic()
    gpu = next(d for d in read_aer(tmp_path / "node").to_dict()["devices"] if d["bdf"] == "0000:3b:00.0")
    assert (
        gpu["correctable"] == 0 and time.monotonic() - started < GENEROUS_S
    )  # its own lines, then a gigabyte of zeros: read to its end, minutes


def test_a_fifo_where_a_sysfs_file_should_be_does_not_hang(tmp_path: Path) -> None:
    shutil.copytree(HEALTHY, tmp_path / "node", symlinks=True)
    state = tmp_path / "node/sys/class/infiniband/mlx5_1/ports/1/state"
    state.unlink()
    os.mkfifo(state)
    started = time.monotonic()
    record = read_ib(tmp_path / "node")
    ports = record.to_dict()["ports"]
    # the FIFO opened: forever
    assert "not a regular file" in ports[1]["unreadable"]["state"] and time.monotonic() - started < GENEROUS_S
    assert ports[1]["state"] is None
    (down,) = ib_port_down(record, Node())
    assert down.data == {"device": "mlx5_1", "port": 1}


def test_deeply_nested_dcgm_json_is_unavailable_not_a_crash() -> None:
    nested = b"{" + b'"a":[' * 100_000 + b"]" * 100_000 + b"}"
    record = read_dcgm(Commands({"/usr/bin/dcgmi diag": CommandOutput(0, nested)}), which_dcgmi)
    assert record.state == "unavailable"


def test_a_symlink_loop_in_sysfs_does_not_hang(tmp_path: Path) -> None:
    shutil.copytree(HEALTHY, tmp_path / "node", symlinks=True)
    device = tmp_path / "node/sys/class/infiniband/mlx5_0/device"
    device.unlink()
    os.symlink("device", device)
    record = read_aer(tmp_path / "node")
    assert record.state == "read"  # mlx5_0's NIC is still read: its class is InfiniBand's


def test_records_read_back_from_someone_elses_json_do_not_break_the_rules_or_the_export() -> None:
    garbled = {
        "xid": {"state": "read", "events": 5},
        "aer": {"state": "read", "devices": [{"bdf": 1, "fatal": "x", "counts": [1]}, "junk"]},
        "ib": {"state": "read", "ports": "abc"},
        "dcgm": {"state": "read", "tests": [{"status": "Fail", "warnings": "x", "error_ids": 7}]},
    }
    results = node_record_results({"node_records": garbled})
    # a read record without its list is of a wrong shape: skipped with the reason (it passed before the types)
    assert [r.outcome for r in results] == [Outcome.SKIP, Outcome.PASS, Outcome.SKIP, Outcome.FAIL]
    assert (results[0].reason, results[2].reason) == (
        "a read record whose events is 5",
        "a read record whose ports is 'abc'",
    )
    assert node_record_results({"node_records": ["not", "a", "dict"]}) == []
    report = node_report({"host": "h", "node_records": garbled}, results=results)
    assert "ds_doctor_node_record_finding" in render_prometheus(report)

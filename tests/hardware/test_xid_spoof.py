"""Xid lines any user could have put into the kernel log: the reader (ds_doctor.hardware.records) takes the driver's
own line only, at the start of the kernel's text, and the rules (ds_doctor.checks.noderecords) judge an Xid a fault
of this node only where its PCI address is a GPU NVML reads or NVIDIA's driver lists. The kernel log and the GPU
lists are fed as data: a recorded log through the reader's command runner, NVML's readings as the hardware section
carries them, the driver's list as a fake /proc tree."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ds_doctor.checks.noderecords import Node, node_record_results, xid_events
from ds_doctor.hardware.records import CommandOutput, driver_gpus, parse_xid_log, read_xids
from ds_doctor.reports.model import Outcome, Severity
from ds_doctor.reports.noderecords import SourceState, XidRecord

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel log is Linux's")

#: NVML's reading of the node's one GPU, as the hardware section carries it
GPU_3B = {"index": 3, "pci_bus_id": "00000000:3B:00.0"}
FELL = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def node_root(tmp_path: Path, *gpus: str) -> Path:
    """A root with NVIDIA's driver loaded and these GPUs (`0000:3b:00.0`) in its /proc/driver/nvidia/gpus."""
    (tmp_path / "proc" / "driver" / "nvidia" / "gpus").mkdir(parents=True)
    for bdf in gpus:
        (tmp_path / "proc" / "driver" / "nvidia" / "gpus" / bdf).mkdir()
    return tmp_path


def dmesg(text: str) -> Any:
    """A command runner whose `dmesg --kernel` prints `text`."""

    def runner(argv: Sequence[str], timeout_s: float, max_bytes: int) -> CommandOutput:
        return (
            CommandOutput(0, text.encode()) if list(argv[:2]) == ["dmesg", "--kernel"] else CommandOutput(1)
        )

    return runner


def xid_result(root: Path, log: str, gpus: Sequence[dict[str, Any]]) -> Any:
    """The node_records[xid] result of a node with this kernel log and these NVML readings."""
    (result,) = node_record_results(
        {"gpus": list(gpus), "node_records": {"xid": read_xids(root, dmesg(log)).to_dict()}}
    )
    return result


# ---- the line: the driver's own, where the kernel's text starts --------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        # a kernel message quoting a string a user chose (a process name, a file name, a label)
        f'[  812.442113] audit: type=1400 audit(1709460001.123:77): apparmor="DENIED" comm="{FELL}"',
        f"[  812.442113] EXT4-fs (sdb1): mounted filesystem {FELL} with ordered data mode",
        f'Mar 03 10:00:01 node12 kernel: audit: type=1400 comm="{FELL}"',
        f"[Tue Mar  3 10:00:01 2026] python3[4242]: {FELL}",
        f"[  812.442113] [drm] {FELL}",
        # an indented line is another message's continuation, whatever its text
        f"               {FELL}",
        f"               [  812.442113] {FELL}",
        # the driver's prefix with fields it never prints
        "[  812.442113] NVRM: Xid (PCI:0000:3b:00 forged by me): 79, pid=1, name=x, GPU has fallen off the bus.",
    ],
)
def test_an_xid_inside_another_message_is_no_xid(line: str) -> None:
    assert parse_xid_log(line + "\n") == ([], 0)


@linux_only
def test_a_spoofed_xid_naming_the_nodes_own_gpu_does_not_fail_it(tmp_path: Path) -> None:
    """The forged text names the node's real GPU, so only the anchor keeps it out: the run passes."""
    log = f'[  812.442113] audit: type=1400 comm="{FELL}"\n'
    result = xid_result(node_root(tmp_path, "0000:3b:00.0"), log, [GPU_3B])
    assert result.outcome == Outcome.PASS and result.findings == () and result.notes["events"] == 0


@pytest.mark.parametrize(
    ("line", "pci", "mig", "at"),
    [
        (f"[  812.442113] {FELL}", "0000:3b:00", None, "812.442113"),
        (f"[Tue Mar  3 10:00:01 2026] {FELL}", "0000:3b:00", None, "Tue Mar  3 10:00:01 2026"),
        (f"Mar 03 10:00:01 node12 kernel: {FELL}", "0000:3b:00", None, "Mar 03 10:00:01"),
        (f"Mar  3 10:00:01 node12 kernel: [  812.442113] {FELL}", "0000:3b:00", None, "Mar  3 10:00:01"),
        (f"[  812.442113] [  T1896] {FELL}", "0000:3b:00", None, "812.442113"),  # CONFIG_PRINTK_CALLER
        (
            "[ 9120.77] NVRM: Xid (PCI:0000:07:00 GPU-I:05): 31, pid=2211, name=python, Ch 00000008, "
            "intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_4e000000.",
            "0000:07:00",
            "GPU-I:05",
            "9120.77",
        ),
        (
            "[ 9120.77] NVRM: Xid (PCI:0000:07:00 GPU-I:05 GPU-CI:00): 31, pid=2211, name=python, Ch 00000008",
            "0000:07:00",
            "GPU-I:05 GPU-CI:00",
            "9120.77",
        ),
        (
            "[ 9120.77] NVRM: Xid (PCI:0000:07:00 GPU-I:05 GPU-C:00): 31, pid=2211, name=python, Ch 00000008",
            "0000:07:00",
            "GPU-I:05 GPU-C:00",
            "9120.77",
        ),
    ],
)
def test_the_drivers_own_lines_are_read_after_each_logs_prefix(
    line: str, pci: str, mig: str | None, at: str
) -> None:
    (event,), left_out = parse_xid_log(line + "\n")
    assert (event.pci, event.mig, event.first_at, left_out) == (pci, mig, at, 0)


# ---- the address: a GPU of this node ------------------------------------------------------------------------------


@linux_only
def test_the_drivers_gpu_list_is_read_from_proc(tmp_path: Path) -> None:
    root = node_root(tmp_path, "0000:9b:00.0", "0000:3b:00.0", "not-a-gpu")
    assert driver_gpus(root) == ["0000:3b:00", "0000:9b:00"]
    assert read_xids(root, dmesg(FELL + "\n")).to_dict()["driver_gpus"] == ["0000:3b:00", "0000:9b:00"]
    assert driver_gpus(tmp_path / "elsewhere") is None  # no folder: no list, not an empty one


@linux_only
def test_an_xid_at_an_address_no_gpu_has_is_shown_and_does_not_fail(tmp_path: Path) -> None:
    log = "[  812.442113] NVRM: Xid (PCI:0000:e1:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off.\n"
    result = xid_result(node_root(tmp_path, "0000:3b:00.0"), log, [GPU_3B])
    assert result.outcome == Outcome.PASS and result.reason is None
    (finding,) = result.findings
    assert finding.invariant == "xid_79" and finding.severity == Severity.WARNING
    assert finding.data == {"pci": "0000:e1:00", "xid": 79, "count": 1, "gpu_seen": False}
    assert "matches no GPU NVML or NVIDIA's driver lists: the line may be forged" in finding.message
    assert "lspci -s 0000:e1:00" in finding.remedy


def test_without_the_drivers_list_nvmls_is_the_one_checked() -> None:
    """A record from before the driver's list was read: an address NVML does not read is not this node's fault."""
    events, _ = parse_xid_log(f"[  812.442113] {FELL.replace('3b:00', '9b:00')}\n")
    (finding,) = xid_events(XidRecord(SourceState.READ, events=tuple(events)), Node.of({"gpus": [GPU_3B]}))
    assert finding.severity == Severity.WARNING and finding.data["gpu_seen"] is False


def test_with_no_list_of_gpus_at_all_an_xid_is_unconfirmed_not_a_fault() -> None:
    """Neither NVML nor the driver listed a GPU: nothing to check the address against, so nothing is drained."""
    events, _ = parse_xid_log(f"[  812.442113] {FELL}\n")
    (finding,) = xid_events(XidRecord(SourceState.READ, events=tuple(events)), Node())
    assert finding.severity == Severity.WARNING and finding.data["gpu_seen"] is None
    assert "no list of this node's GPUs" in finding.message


@linux_only
def test_an_xid_on_a_gpu_nvml_reads_still_fails_the_node(tmp_path: Path) -> None:
    log = (
        "[ 7310.004417] NVRM: Xid (PCI:0000:3b:00): 48, pid=61822, name=python3, An uncorrectable double bit "
        "error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.\n"
    )
    result = xid_result(node_root(tmp_path, "0000:3b:00.0"), log, [GPU_3B])
    assert result.outcome == Outcome.FAIL and "GPU 3 (0000:3b:00): Xid 48" in (result.reason or "")
    (finding,) = result.findings
    assert finding.severity == Severity.ERROR and finding.data == {"pci": "0000:3b:00", "xid": 48, "count": 1}


@linux_only
def test_a_gpu_that_fell_off_the_bus_fails_the_node_though_nvml_no_longer_reads_it(tmp_path: Path) -> None:
    """NVML cannot read a lost GPU's address (its handle fails); the driver still lists it."""
    log = f"[ 8812.442125] {FELL.replace('3b:00', '9b:00')}\n"
    lost = {"index": 7, "unavailable": {"handle": "NVMLError_GPUIsLost: GPU is lost"}}
    result = xid_result(node_root(tmp_path, "0000:3b:00.0", "0000:9b:00.0"), log, [GPU_3B, lost])
    assert result.outcome == Outcome.FAIL
    assert "GPU at PCI 0000:9b:00: Xid 79 (GPU has fallen off the bus)" in (result.reason or "")

"""Rules over the node's own fault records (`ds_doctor.hardware.records`: Xid errors, PCIe AER counters, InfiniBand
ports, DCGM's quick diagnostic), and the `node_records[xid|aer|ib|dcgm]` results they make.

Like the GPU health rules (`ds_doctor.checks.health`) they read only the records the readers return (the types of
`ds_doctor.reports.noderecords`, read once from the hardware section's JSON), so they are tested over recorded
records. Severity `error` means the node is not fit for a training job (the run exits 1):
a GPU the driver reported lost or corrupt, a fatal PCIe error, a rail down, a DCGM test failed. `warning` means
it will run, but slower or less surely than it should.

A record that does not exist on a node (no NVIDIA driver, no RDMA device, no dcgmi) makes no result: the hardware
section's record says why, and so does each result's `absent` note. A record that exists but could not be read
(the kernel log restricted to root, say) makes a `skip` result with the reason: the check did not run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ds_doctor.hardware.xid import pci_key
from ds_doctor.reports.model import CaseResult, Finding, Outcome, Severity
from ds_doctor.reports.noderecords import (
    AER_KINDS,
    AerDevice,
    AerRecord,
    DcgmRecord,
    DcgmTest,
    IbPort,
    IbRecord,
    NodeRecords,
    SourceRecord,
    SourceState,
    XidEvent,
    XidRecord,
)
from ds_doctor.reports.sections import GpuReading

PROBE = "node_records"


@dataclasses.dataclass(frozen=True)
class Node:
    """What the rules know of the node besides the record: its GPUs as NVML read them, and the NCCL_IB_HCA its
    jobs run with (a port NCCL is told not to use is no rail of theirs)."""

    gpus: tuple[GpuReading, ...] = ()
    nccl_ib_hca: str | None = None

    @classmethod
    def of(cls, hardware: Mapping[str, Any], env: Mapping[str, Any] | None = None) -> Node:
        gpus = tuple(
            GpuReading.of(g) for g in hardware.get("gpus") or () if isinstance(g, Mapping | GpuReading)
        )
        variables = (env or {}).get("variables") or {}
        spec = variables.get("NCCL_IB_HCA") if isinstance(variables, Mapping) else None
        return cls(gpus, spec if isinstance(spec, str) and spec.strip() else None)

    def gpu_at(self, pci: str | None) -> GpuReading | None:
        return next((g for g in self.gpus if pci is not None and pci_key(g.pci_bus_id) == pci), None)

    def nccl_uses(self, device: str | None, port: object) -> bool:
        """Whether NCCL's IB transport would use this port under NCCL_IB_HCA: `^` excludes, `=` matches names
        exactly (else as prefixes), `name:port` one port (NCCL src/transport/net_ib.cc, matchIfList)."""
        if not self.nccl_ib_hca:
            return True
        spec = self.nccl_ib_hca.strip()
        exclude = spec.startswith("^")
        spec = spec[1:] if exclude else spec
        exact = spec.startswith("=")
        spec = spec[1:] if exact else spec
        listed = False
        device = str(device)
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, _, wanted = item.partition(":")
            named = device == name if exact else device.startswith(name)
            listed = listed or (named and (not wanted.isdigit() or str(port) == wanted))
        return listed != exclude


def _finding(rule: str, severity: Severity, message: str, expected: str, remedy: str, **data: Any) -> Finding:
    return Finding(
        invariant=rule,
        severity=severity,
        message=message,
        stage=PROBE,
        expected=expected,
        remedy=remedy,
        data=data,
    )


# ---- Xid errors --------------------------------------------------------------------------------------------------


def _remap_done(gpu: GpuReading) -> bool:
    """NVML says no retirement or remap is pending and none failed: the GPU was reset since the event."""
    pending = [p for p in (gpu.remapped_rows_pending, gpu.retired_pages_pending) if p is not None]
    return bool(pending) and not any(pending) and not gpu.remapped_rows_failed


@dataclasses.dataclass(frozen=True)
class XidKind:
    """What an Xid means for a training node. Names: NVIDIA open-gpu-kernel-modules nverror.h; actions: NVIDIA's
    Xid catalog (docs.nvidia.com/deploy/xid-errors), resolution buckets RESTART_APP, RESET_GPU, RESTART_BM."""

    meaning: str
    severity: Severity
    remedy: str
    #: NVML's reading of the GPU shows the event has since been dealt with (a reset applied the remap)
    cleared: Callable[[GpuReading], bool] | None = None


_APP = (
    "usually the job's own fault (a bad address, an illegal instruction): check its stack; if it repeats across "
    "jobs and code, run `dcgmi diag -r 3` on this GPU"
)
_RESET = "drain the node and reset the GPU (nvidia-smi -r, or reboot); RMA the GPU if it comes back"

XIDS: dict[int, XidKind] = {
    13: XidKind("graphics engine exception", Severity.WARNING, _APP),
    31: XidKind("GPU memory page fault (MMU error)", Severity.WARNING, _APP),
    43: XidKind("GPU stopped processing (channel reset)", Severity.WARNING, _APP),
    45: XidKind(
        "preemptive cleanup after an earlier error", Severity.INFO, "follows another Xid: see that one"
    ),
    48: XidKind("double-bit ECC error (DBE)", Severity.ERROR, _RESET),
    63: XidKind(
        "ECC page retirement or row remap recorded",
        Severity.ERROR,
        "reset the GPU (nvidia-smi -r) so the retirement or remap takes effect",
        _remap_done,
    ),
    64: XidKind(
        "ECC page retirement or row remap failed",
        Severity.ERROR,
        "drain the node and RMA the GPU (no spare rows)",
    ),
    74: XidKind(
        "NVLink error",
        Severity.ERROR,
        "reset the GPUs (or reboot); if it repeats, the NVLink, baseboard or GPU",
    ),
    79: XidKind(
        "GPU has fallen off the bus",
        Severity.ERROR,
        "drain the node and reboot it; if it repeats, reseat the GPU, check its power and riser, or RMA it",
    ),
    92: XidKind(
        "high single-bit ECC error rate",
        Severity.WARNING,
        "watch the GPU's ECC counts (gpu_health); an RMA if they keep rising",
    ),
    94: XidKind(
        "contained ECC error",
        Severity.ERROR,
        "reset the GPU after the running job so the row remap takes effect; RMA if it repeats",
        _remap_done,
    ),
    95: XidKind("uncontained ECC error", Severity.ERROR, _RESET),
    119: XidKind(
        "GSP RPC timeout", Severity.ERROR, "reset the GPU or reboot; update the driver if it repeats"
    ),
    120: XidKind("GSP error", Severity.ERROR, "reset the GPU or reboot; update the driver if it repeats"),
}
UNKNOWN_XID = XidKind(
    "not in ds-doctor's table",
    Severity.WARNING,
    "look it up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)",
)


def _where(node: Node, pci: str | None) -> str:
    gpu = node.gpu_at(pci)
    return f"GPU {gpu.index} ({pci})" if gpu is not None else f"GPU at PCI {pci or '?'}"


def gpus_seen(record: XidRecord, node: Node) -> frozenset[str] | None:
    """The PCI addresses of this node's GPUs: those NVML read and those NVIDIA's driver lists (the record's
    `driver_gpus`, which keeps a GPU that fell off the bus: NVML no longer reads its address). None where there is
    neither list (NVML read no GPU's address, and the record carries no driver list, as one written before
    ds-doctor kept it): nothing to check an Xid's address against."""
    seen = {key for key in (pci_key(g.pci_bus_id) for g in node.gpus) if key is not None}
    if record.driver_gpus is None:
        return frozenset(seen) if seen else None
    return frozenset(seen | {key for key in map(pci_key, record.driver_gpus) if key is not None})


def _unseen(pci: str | None, seen: frozenset[str] | None) -> str | None:
    """Why an Xid is not judged a fault of this node, or None where its address is one of the node's GPUs. Any user
    can get text into the kernel log, and a line naming a GPU the node does not have drains nothing."""
    if seen is None:
        return "no list of this node's GPUs (from NVML or NVIDIA's driver) to check its address against"
    if pci not in seen:
        return (
            "its address matches no GPU NVML or NVIDIA's driver lists: the line may be forged (any user can get "
            "text into the kernel log) or come from a GPU no longer visible"
        )
    return None


def _xid_finding(event: XidEvent, node: Node, seen: frozenset[str] | None) -> Finding | None:
    xid, pci = event.xid, event.pci
    if xid is None:
        return None
    kind = XIDS.get(xid, UNKNOWN_XID)
    gpu = node.gpu_at(pci)
    cleared = kind.cleared is not None and gpu is not None and kind.cleared(gpu)
    unseen = _unseen(pci, seen)
    severity = Severity.WARNING if (cleared or unseen) and kind.severity == Severity.ERROR else kind.severity
    count = event.count or 1
    said = f": {event.message}" if event.message else ""
    remedy = kind.remedy + (
        "; the kernel log keeps the Xid until the next boot" if severity == Severity.ERROR else ""
    )
    return _finding(
        f"xid_{xid}",
        severity,
        f"{_where(node, pci)}: Xid {xid} ({kind.meaning}), {count} time(s) since boot{said}"
        + ("; NVML shows no retirement or remap pending now: the GPU was reset since" if cleared else "")
        + (f"; not judged a fault of this node: {unseen}" if unseen else ""),
        "no Xid in the kernel log since boot",
        f"check that the line is the driver's own and that a GPU is at {pci or '?'} (lspci -s {pci or '?'}); "
        f"if so: {remedy}"
        if unseen
        else remedy,
        pci=pci,
        xid=xid,
        count=count,
        **({"gpu_seen": False if seen is not None else None} if unseen else {}),
    )


def xid_events(record: XidRecord, node: Node) -> list[Finding]:
    """One finding per (GPU, Xid) the driver logged since boot: hardware and driver faults are errors, the ones a
    job's own bug causes (13, 31, 43) warnings, the cleanup after another (45) information. An Xid whose address
    is no GPU of this node (`gpus_seen`) is at most a warning: shown, never failing the run."""
    seen = gpus_seen(record, node)
    findings = (_xid_finding(e, node, seen) for e in record.events)
    return [f for f in findings if f is not None]


# ---- PCIe AER ----------------------------------------------------------------------------------------------------


def _detail(device: AerDevice, kind: str) -> str:
    return ", ".join(f"{name} {n}" for name, n in list(device.counts.get(kind, {}).items())[:8])


def _device_name(device: AerDevice) -> str:
    return f"{device.bdf} ({device.role})"


def aer_uncorrectable(record: AerRecord, node: Node) -> list[Finding]:
    """Uncorrectable PCIe errors since boot on a GPU, an RDMA NIC or a port above one: fatal ones are an error (the
    link was reset or the device lost), non-fatal ones (a completion timeout, say) a warning."""
    out = []
    for device in record.devices:
        for kind, severity in (("fatal", Severity.ERROR), ("nonfatal", Severity.WARNING)):
            count = device.total(kind)
            if count:
                detail = _detail(device, kind)
                out.append(
                    _finding(
                        f"aer_{kind}",
                        severity,
                        f"{_device_name(device)}: {count} {kind} uncorrectable PCIe error(s) since boot"
                        + (f" ({detail})" if detail else ""),
                        f"0 {kind} AER errors",
                        "check the slot, riser and cabling of this link (reseat); drain the node if they recur",
                        pci=device.bdf,
                        kind=kind,
                        count=count,
                    )
                )
    return out


def _aer_counts(record: AerRecord | None) -> dict[tuple[str, str], int]:
    counts = {}
    for device in record.devices if record is not None else ():
        for kind in AER_KINDS:
            value = device.total(kind)
            if value is not None:
                counts[(str(device.bdf), kind)] = value
    return counts


def aer_rising(current: AerRecord, previous: AerRecord | None) -> list[Finding]:
    """AER counts higher than in a previous reading of the same node (its baseline report's `aer` record): a link
    that keeps correcting errors is one that will fail. A lower count means the node rebooted (the counters start
    at 0 each boot): nothing to compare."""
    before = _aer_counts(previous)
    out = []
    for (bdf, kind), now in _aer_counts(current).items():
        then = before.get((bdf, kind))
        if then is not None and now > then:
            out.append(
                _finding(
                    "aer_rising",
                    Severity.WARNING,
                    f"{bdf}: {kind} PCIe errors rose from {then} to {now} since the baseline",
                    f"{kind} AER count no higher than the baseline's {then}",
                    "a link that keeps correcting errors degrades: reseat the device or riser before it fails",
                    pci=bdf,
                    kind=kind,
                    before=then,
                    now=now,
                )
            )
    return out


# ---- InfiniBand ports --------------------------------------------------------------------------------------------

#: Counters of a link's own faults (a warning) and of congestion or management traffic dropped (information).
LINK_ERRORS = (
    "link_downed",
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
DISCARDS = (
    "port_xmit_discards",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "VL15_dropped",
)


def _port_name(port: IbPort) -> str:
    return f"{port.device} port {port.port}"


def _down_hint(port: IbPort) -> str:
    if port.phys_state == "LinkUp":
        return "the link is up but no subnet manager has activated the port (check opensm / UFM)"
    if port.phys_state == "Disabled":
        return "the port is disabled"
    return "no link: check the cable, the transceiver and the switch port"


#: what a port that ever carried a packet since boot shows (Linux, drivers/infiniband/core/sysfs.c)
_TRAFFIC = ("port_rcv_data", "port_xmit_data", "link_downed")


def _idle_since_boot(port: IbPort) -> bool:
    """Every traffic counter read, and 0: the port never carried data nor lost a link since boot (a spare port of a
    dual-port HCA, or one never cabled since the node came up); a counter not read is no evidence of that."""
    return all(port.counters.get(name) == 0 for name in _TRAFFIC)


def ib_port_down(record: IbRecord, node: Node) -> list[Finding]:
    """A port not ACTIVE and LinkUp: a rail a job's NCCL would use is missing (an error, where it carried traffic
    since boot: a link lost); one idle since boot is a warning (a spare port, or a cable never plugged: the record
    cannot tell); an Ethernet (RoCE) port is a warning (it may be a management port), and a port NCCL_IB_HCA leaves
    out information only."""
    out = []
    for port in record.ports:
        if port.is_up():
            continue
        used = node.nccl_uses(port.device, port.port)
        idle = _idle_since_boot(port)
        lost = port.link_layer == "InfiniBand" and not idle
        severity = Severity.ERROR if lost else Severity.WARNING
        out.append(
            _finding(
                "ib_port_down",
                severity if used else Severity.INFO,
                f"{_port_name(port)} is {port.state} / {port.phys_state}: {_down_hint(port)}"
                + (" (no traffic on it since boot: a spare port, or one never cabled)" if idle else "")
                + ("" if used else " (NCCL_IB_HCA leaves it out)"),
                "ACTIVE / LinkUp",
                "bring the link up, or leave the port out of NCCL_IB_HCA if no job should use it",
                device=port.device,
                port=port.port,
            )
        )
    return out


def _nonzero(port: IbPort, names: Sequence[str]) -> dict[str, int]:
    return {name: port.counters[name] for name in names if port.counters.get(name)}


def ib_link_errors(record: IbRecord, node: Node) -> list[Finding]:
    """Link error counters above 0 on a port NCCL uses: the link went down, or corrupted symbols and packets (a
    warning: a marginal cable or transceiver); discards are congestion (information)."""
    out = []
    for port in record.ports:
        if not node.nccl_uses(port.device, port.port):
            continue
        for rule, names, severity, remedy in (
            ("ib_link_errors", LINK_ERRORS, Severity.WARNING, "check or replace the cable and transceiver"),
            ("ib_discards", DISCARDS, Severity.INFO, "congestion on the fabric: check the switch's counters"),
        ):
            counts = _nonzero(port, names)
            if counts:
                said = ", ".join(f"{name} {n}" for name, n in counts.items())
                out.append(
                    _finding(
                        rule,
                        severity,
                        f"{_port_name(port)}: {said}",
                        "0",
                        remedy,
                        device=port.device,
                        port=port.port,
                        **counts,
                    )
                )
    return out


def _rated(record: IbRecord, node: Node) -> list[tuple[IbPort, float]]:
    """The active ports NCCL uses whose rate was read, with it."""
    return [
        (p, p.rate_gbps)
        for p in record.ports
        if p.is_up() and p.rate_gbps is not None and node.nccl_uses(p.device, p.port)
    ]


def ib_rate_below_peers(record: IbRecord, node: Node) -> list[Finding]:
    """An active port slower than the node's fastest of the same link layer: a rail trained down (a narrower
    width or a lower speed) holds every collective across it back."""
    ports = _rated(record, node)
    out = []
    for port, rate in ports:
        fastest = max(r for p, r in ports if p.link_layer == port.link_layer)
        if rate < fastest:
            out.append(
                _finding(
                    "ib_rate_below_peers",
                    Severity.WARNING,
                    f"{_port_name(port)} runs at {port.rate}, the node's other ports at {fastest:g} Gb/sec",
                    f"{fastest:g} Gb/sec",
                    "reseat or replace the cable and transceiver; check the switch port's speed",
                    device=port.device,
                    port=port.port,
                    rate_gbps=rate,
                    peers_gbps=fastest,
                )
            )
    return out


# ---- DCGM --------------------------------------------------------------------------------------------------------

DCGM_SEVERITY = {"Fail": Severity.ERROR, "Warn": Severity.WARNING, "Skip": Severity.INFO}


def _dcgm_finding(test: DcgmTest) -> Finding | None:
    status = test.status
    severity = DCGM_SEVERITY.get(status)
    warnings = test.warnings
    if severity is None or (severity == Severity.INFO and not warnings):
        return None
    on = f" on {test.entity}" if test.entity else ""
    said = f": {'; '.join(warnings)}" if warnings else ""
    return _finding(
        f"dcgm_{status.lower()}",
        severity,
        f"dcgmi diag -r 1: {test.test} ({test.category}) {status}{on}{said}",
        "Pass",
        "follow DCGM's message; an error that asks for a reset means drain the node and reset the GPU",
        test=test.test,
        entity=test.entity,
        error_ids=list(test.error_ids),
    )


def dcgm_failed_tests(record: DcgmRecord, node: Node) -> list[Finding]:
    """Each DCGM test that failed (an error) or warned (a warning) on an entity; a skip with a reason is
    information. dcgmi exiting non-zero with no failed test is a warning of its own."""
    findings = [f for f in (_dcgm_finding(t) for t in record.tests) if f is not None]
    code = record.returncode
    if code and not any(f.is_error for f in findings):
        findings.append(
            _finding(
                "dcgm_exit",
                Severity.WARNING,
                f"dcgmi diag -r 1 exited {code} but reported no failed test",
                "exit status 0",
                "run `dcgmi diag -r 1` by hand and read its output",
                returncode=code,
            )
        )
    return findings


# ---- the results -------------------------------------------------------------------------------------------------


def _findings(record: SourceRecord, node: Node, previous: AerRecord | None) -> list[Finding]:
    """What the rules over a read record find (with the baseline's AER record, the counts that rose since)."""
    if isinstance(record, XidRecord):
        return xid_events(record, node)
    if isinstance(record, AerRecord):
        rising = aer_rising(record, previous) if previous is not None else []
        return aer_uncorrectable(record, node) + rising
    if isinstance(record, IbRecord):
        return ib_port_down(record, node) + ib_link_errors(record, node) + ib_rate_below_peers(record, node)
    return dcgm_failed_tests(record, node)


def _said(record: SourceRecord) -> dict[str, Any]:
    """What a result notes of its record, besides the rules' findings: where the Xids came from and how much of
    the log was kept, DCGM's version and exit status, and how many entries a read record has."""
    said: dict[str, Any] = {}
    if isinstance(record, XidRecord):
        said = {"source": record.source, "partial": record.partial, "left_out": record.left_out}
        listed = ("events", len(record.events))
    elif isinstance(record, AerRecord):
        listed = ("devices", len(record.devices))
    elif isinstance(record, IbRecord):
        listed = ("ports", len(record.ports))
    else:
        said = {"version": record.version, "returncode": record.returncode}
        listed = ("tests", len(record.tests))
    notes = {key: value for key, value in said.items() if value is not None}
    return {**notes, listed[0]: listed[1]} if record.state is SourceState.READ else notes


def _result(
    name: str, record: SourceRecord, findings: list[Finding], absent: Mapping[str, str]
) -> CaseResult:
    failed = [f.message for f in findings if f.is_error]
    unavailable = record.state is SourceState.UNAVAILABLE
    notes = _said(record)
    if absent:
        notes["absent"] = dict(absent)  # the records this node does not have, and why
    return CaseResult(
        probe=PROBE,
        case=f"{PROBE}[{name}]",
        scenario="smoke",
        level=1,
        world_size=1,
        device_kind="cuda" if name in ("xid", "dcgm") else "cpu",
        outcome=Outcome.SKIP if unavailable else Outcome.FAIL if failed else Outcome.PASS,
        duration_s=0.0,
        reason=str(record.reason) if unavailable else "; ".join(failed) or None,
        findings=tuple(findings),
        notes=notes,
    )


def _baseline_aer(baseline: Mapping[str, Any] | None) -> AerRecord | None:
    """The AER record of a baseline report's hardware section (or of the node_records given as one)."""
    if baseline is None:
        return None
    records = NodeRecords.of(baseline.get("node_records", baseline))
    return records.aer if records is not None else None


def node_record_results(
    hardware: Mapping[str, Any],
    env: Mapping[str, Any] | None = None,
    *,
    baseline: Mapping[str, Any] | None = None,
) -> list[CaseResult]:
    """One `node_records[<record>]` result per record this node has: `fail` on an error finding, `pass` otherwise,
    `skip` where it could not be read (or was of a wrong shape: a report is data from anywhere); none for a record
    the node does not have, or a report from before these records were read. With the baseline report's hardware
    section, AER counts that rose since are warnings."""
    records = NodeRecords.of(hardware.get("node_records"))
    if records is None:
        return []
    node = Node.of(hardware, env)
    absent = {name: str(r.reason) for name, r in records.sources() if r.state is SourceState.ABSENT}
    previous = _baseline_aer(baseline)
    results = []
    for name, record in records.sources():
        if record.state is SourceState.ABSENT:
            continue
        findings = _findings(record, node, previous) if record.state is SourceState.READ else []
        results.append(_result(name, record, findings, absent))
    return results

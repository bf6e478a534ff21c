"""Rules over the node's own fault records (`ds_doctor.hardware.records`: Xid errors, PCIe AER counters, InfiniBand
ports, DCGM's quick diagnostic), and the `node_records[xid|aer|ib|dcgm]` results they make.

Like the GPU health rules (`ds_doctor.checks.health`) they read only the dicts the readers return, so they are
tested over recorded records. Severity `error` means the node is not fit for a training job (the run exits 1):
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

from ds_doctor.hardware.records import ABSENT, READ, UNAVAILABLE, pci_key
from ds_doctor.reports.records import CaseResult, Finding, Outcome, Severity
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

    def nccl_uses(self, device: str, port: object) -> bool:
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


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _entries(record: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    """The dicts under a record's list (a record read back from a report is someone else's JSON)."""
    value = record.get(key)
    return [entry for entry in value if isinstance(entry, Mapping)] if isinstance(value, list) else []


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _ints(value: object) -> list[int]:
    return (
        [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
        if isinstance(value, list)
        else []
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


def gpus_seen(record: Mapping[str, Any], node: Node) -> frozenset[str] | None:
    """The PCI addresses of this node's GPUs: those NVML read and those NVIDIA's driver lists (the record's
    `driver_gpus`, which keeps a GPU that fell off the bus: NVML no longer reads its address). None where there is
    neither list (NVML read no GPU's address, and the record carries no driver list, as one written before
    ds-doctor kept it): nothing to check an Xid's address against."""
    seen = {key for key in (pci_key(g.pci_bus_id) for g in node.gpus) if key is not None}
    listed = record.get("driver_gpus")
    if not isinstance(listed, list):
        return frozenset(seen) if seen else None
    return frozenset(
        seen | {key for key in (pci_key(v) for v in listed if isinstance(v, str)) if key is not None}
    )


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


def _xid_finding(event: Mapping[str, Any], node: Node, seen: frozenset[str] | None) -> Finding | None:
    xid, pci = event.get("xid"), event.get("pci")
    if not isinstance(xid, int):
        return None
    kind = XIDS.get(xid, UNKNOWN_XID)
    gpu = node.gpu_at(pci)
    cleared = kind.cleared is not None and gpu is not None and kind.cleared(gpu)
    unseen = _unseen(pci if isinstance(pci, str) else None, seen)
    severity = Severity.WARNING if (cleared or unseen) and kind.severity == Severity.ERROR else kind.severity
    count = _count(event.get("count")) or 1
    said = f": {event.get('message')}" if event.get("message") else ""
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


def xid_events(record: Mapping[str, Any], node: Node) -> list[Finding]:
    """One finding per (GPU, Xid) the driver logged since boot: hardware and driver faults are errors, the ones a
    job's own bug causes (13, 31, 43) warnings, the cleanup after another (45) information. An Xid whose address
    is no GPU of this node (`gpus_seen`) is at most a warning: shown, never failing the run."""
    seen = gpus_seen(record, node)
    findings = (_xid_finding(e, node, seen) for e in _entries(record, "events"))
    return [f for f in findings if f is not None]


# ---- PCIe AER ----------------------------------------------------------------------------------------------------

AER_KINDS = ("correctable", "nonfatal", "fatal")


def _detail(device: Mapping[str, Any], kind: str) -> str:
    counts = device.get("counts")
    of_kind = counts.get(kind) if isinstance(counts, Mapping) else None
    return (
        ", ".join(f"{name} {n}" for name, n in list(of_kind.items())[:8])
        if isinstance(of_kind, Mapping)
        else ""
    )


def _device_name(device: Mapping[str, Any]) -> str:
    return f"{device.get('bdf')} ({device.get('role')})"


def aer_uncorrectable(record: Mapping[str, Any], node: Node) -> list[Finding]:
    """Uncorrectable PCIe errors since boot on a GPU, an RDMA NIC or a port above one: fatal ones are an error (the
    link was reset or the device lost), non-fatal ones (a completion timeout, say) a warning."""
    out = []
    for device in _entries(record, "devices"):
        for kind, severity in (("fatal", Severity.ERROR), ("nonfatal", Severity.WARNING)):
            count = _count(device.get(kind))
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
                        pci=device.get("bdf"),
                        kind=kind,
                        count=count,
                    )
                )
    return out


def _aer_counts(record: Mapping[str, Any] | None) -> dict[tuple[str, str], int]:
    counts = {}
    for device in _entries(record or {}, "devices"):
        for kind in AER_KINDS:
            value = device.get(kind)
            if isinstance(value, int) and not isinstance(value, bool):
                counts[(str(device.get("bdf")), kind)] = value
    return counts


def aer_rising(current: Mapping[str, Any], previous: Mapping[str, Any] | None) -> list[Finding]:
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


def _port_name(port: Mapping[str, Any]) -> str:
    return f"{port.get('device')} port {port.get('port')}"


def _is_up(port: Mapping[str, Any]) -> bool:
    return port.get("state") == "ACTIVE" and port.get("phys_state") == "LinkUp"


def _down_hint(port: Mapping[str, Any]) -> str:
    if port.get("phys_state") == "LinkUp":
        return "the link is up but no subnet manager has activated the port (check opensm / UFM)"
    if port.get("phys_state") == "Disabled":
        return "the port is disabled"
    return "no link: check the cable, the transceiver and the switch port"


#: what a port that ever carried a packet since boot shows (Linux, drivers/infiniband/core/sysfs.c)
_TRAFFIC = ("port_rcv_data", "port_xmit_data", "link_downed")


def _idle_since_boot(port: Mapping[str, Any]) -> bool:
    """Every traffic counter read, and 0: the port never carried data nor lost a link since boot (a spare port of a
    dual-port HCA, or one never cabled since the node came up); a counter not read is no evidence of that."""
    counters = port.get("counters") or {}
    return all(isinstance(counters.get(name), int) for name in _TRAFFIC) and not any(
        counters.get(name) for name in _TRAFFIC
    )


def ib_port_down(record: Mapping[str, Any], node: Node) -> list[Finding]:
    """A port not ACTIVE and LinkUp: a rail a job's NCCL would use is missing (an error, where it carried traffic
    since boot: a link lost); one idle since boot is a warning (a spare port, or a cable never plugged: the record
    cannot tell); an Ethernet (RoCE) port is a warning (it may be a management port), and a port NCCL_IB_HCA leaves
    out information only."""
    out = []
    for port in _entries(record, "ports"):
        if _is_up(port):
            continue
        used = node.nccl_uses(str(port.get("device")), port.get("port"))
        idle = _idle_since_boot(port)
        lost = port.get("link_layer") == "InfiniBand" and not idle
        severity = Severity.ERROR if lost else Severity.WARNING
        out.append(
            _finding(
                "ib_port_down",
                severity if used else Severity.INFO,
                f"{_port_name(port)} is {port.get('state')} / {port.get('phys_state')}: {_down_hint(port)}"
                + (" (no traffic on it since boot: a spare port, or one never cabled)" if idle else "")
                + ("" if used else " (NCCL_IB_HCA leaves it out)"),
                "ACTIVE / LinkUp",
                "bring the link up, or leave the port out of NCCL_IB_HCA if no job should use it",
                device=port.get("device"),
                port=port.get("port"),
            )
        )
    return out


def _nonzero(port: Mapping[str, Any], names: Sequence[str]) -> dict[str, int]:
    counters = port.get("counters") or {}
    return {name: _count(counters.get(name)) for name in names if _count(counters.get(name))}


def ib_link_errors(record: Mapping[str, Any], node: Node) -> list[Finding]:
    """Link error counters above 0 on a port NCCL uses: the link went down, or corrupted symbols and packets (a
    warning: a marginal cable or transceiver); discards are congestion (information)."""
    out = []
    for port in _entries(record, "ports"):
        if not node.nccl_uses(str(port.get("device")), port.get("port")):
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
                        device=port.get("device"),
                        port=port.get("port"),
                        **counts,
                    )
                )
    return out


def ib_rate_below_peers(record: Mapping[str, Any], node: Node) -> list[Finding]:
    """An active port slower than the node's fastest of the same link layer: a rail trained down (a narrower
    width or a lower speed) holds every collective across it back."""
    ports = [
        p
        for p in _entries(record, "ports")
        if _is_up(p)
        and isinstance(p.get("rate_gbps"), int | float)
        and node.nccl_uses(str(p.get("device")), p.get("port"))
    ]
    out = []
    for port in ports:
        peers = [p["rate_gbps"] for p in ports if p.get("link_layer") == port.get("link_layer")]
        fastest = max(peers)
        if port["rate_gbps"] < fastest:
            out.append(
                _finding(
                    "ib_rate_below_peers",
                    Severity.WARNING,
                    f"{_port_name(port)} runs at {port.get('rate')}, the node's other ports at {fastest:g} Gb/sec",
                    f"{fastest:g} Gb/sec",
                    "reseat or replace the cable and transceiver; check the switch port's speed",
                    device=port.get("device"),
                    port=port.get("port"),
                    rate_gbps=port["rate_gbps"],
                    peers_gbps=fastest,
                )
            )
    return out


# ---- DCGM --------------------------------------------------------------------------------------------------------

DCGM_SEVERITY = {"Fail": Severity.ERROR, "Warn": Severity.WARNING, "Skip": Severity.INFO}


def _dcgm_finding(test: Mapping[str, Any]) -> Finding | None:
    status = test.get("status")
    severity = DCGM_SEVERITY.get(str(status))
    warnings = _strings(test.get("warnings"))
    if severity is None or (severity == Severity.INFO and not warnings):
        return None
    on = f" on {test.get('entity')}" if test.get("entity") else ""
    said = f": {'; '.join(warnings)}" if warnings else ""
    return _finding(
        f"dcgm_{str(status).lower()}",
        severity,
        f"dcgmi diag -r 1: {test.get('test')} ({test.get('category')}) {status}{on}{said}",
        "Pass",
        "follow DCGM's message; an error that asks for a reset means drain the node and reset the GPU",
        test=test.get("test"),
        entity=test.get("entity"),
        error_ids=_ints(test.get("error_ids")),
    )


def dcgm_failed_tests(record: Mapping[str, Any], node: Node) -> list[Finding]:
    """Each DCGM test that failed (an error) or warned (a warning) on an entity; a skip with a reason is
    information. dcgmi exiting non-zero with no failed test is a warning of its own."""
    findings = [f for f in (_dcgm_finding(t) for t in _entries(record, "tests")) if f is not None]
    code = record.get("returncode")
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

Rule = Callable[[Mapping[str, Any], Node], list[Finding]]

RULES: dict[str, tuple[Rule, ...]] = {
    "xid": (xid_events,),
    "aer": (aer_uncorrectable,),
    "ib": (ib_port_down, ib_link_errors, ib_rate_below_peers),
    "dcgm": (dcgm_failed_tests,),
}

#: What each result notes of its record, besides the rules' findings.
NOTED = {"xid": ("source", "partial", "left_out"), "dcgm": ("version", "returncode")}


def _notes(name: str, record: Mapping[str, Any], absent: Mapping[str, str]) -> dict[str, Any]:
    notes: dict[str, Any] = {
        key: record.get(key) for key in NOTED.get(name, ()) if record.get(key) is not None
    }
    for key in ("devices", "ports", "events", "tests"):
        if isinstance(record.get(key), list):
            notes[key] = len(record[key])
    if absent:
        notes["absent"] = dict(absent)  # the records this node does not have, and why
    return notes


def _result(
    name: str, record: Mapping[str, Any], findings: list[Finding], absent: Mapping[str, str]
) -> CaseResult:
    failed = [f.message for f in findings if f.is_error]
    unavailable = record.get("state") == UNAVAILABLE
    return CaseResult(
        probe=PROBE,
        case=f"{PROBE}[{name}]",
        scenario="smoke",
        level=1,
        world_size=1,
        device_kind="cuda" if name in ("xid", "dcgm") else "cpu",
        outcome=Outcome.SKIP if unavailable else Outcome.FAIL if failed else Outcome.PASS,
        duration_s=0.0,
        reason=str(record.get("reason")) if unavailable else "; ".join(failed) or None,
        findings=tuple(findings),
        notes=_notes(name, record, absent),
    )


def _baseline_records(baseline: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The node_records of a baseline report's hardware section (or of the dict given as one)."""
    records = (baseline or {}).get("node_records", baseline or {})
    return records if isinstance(records, Mapping) else {}


def node_record_results(
    hardware: Mapping[str, Any],
    env: Mapping[str, Any] | None = None,
    *,
    baseline: Mapping[str, Any] | None = None,
) -> list[CaseResult]:
    """One `node_records[<record>]` result per record this node has: `fail` on an error finding, `pass` otherwise,
    `skip` where it could not be read; none for a record the node does not have, or a report from before these
    records were read. With the baseline report's hardware section, AER counts that rose since are warnings."""
    records = hardware.get("node_records")
    if not isinstance(records, Mapping):
        return []
    node = Node.of(hardware, env)
    absent = {
        name: str(r.get("reason"))
        for name, r in records.items()
        if isinstance(r, Mapping) and r.get("state") == ABSENT
    }
    results = []
    for name, rules in RULES.items():
        record = records.get(name)
        if not isinstance(record, Mapping) or record.get("state") not in (READ, UNAVAILABLE):
            continue
        findings = [f for rule in rules for f in rule(record, node)] if record.get("state") == READ else []
        if name == "aer" and baseline is not None and record.get("state") == READ:
            previous = _baseline_records(baseline).get("aer")
            findings += aer_rising(record, previous if isinstance(previous, Mapping) else None)
        results.append(_result(name, record, findings, absent))
    return results

"""The node's own fault records as types: Xid errors, PCIe AER counters, InfiniBand ports and DCGM's quick
diagnostic, each a record whose `state` is one of a closed set (`SourceState`) with the data it read beside it.

`ds_doctor.hardware.records` builds them, `ds_doctor.checks.noderecords` judges them, Prometheus exports them
(`ds_doctor.reports.prometheus`), and the report carries them as the schema's `node_records` (`to_dict`: exactly the
JSON the readers wrote before these types, key for key). A report's JSON is data from anywhere, so `from_dict` reads
any shape and never raises: a record of a wrong shape (not an object, a state outside the set, a read record
without its list) is `unavailable` with the reason, an entry of a wrong shape is left out, and a field of a wrong
type is None (or empty).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias

from ds_doctor.reports.measures import finite


class SourceState(str, enum.Enum):
    """What a reader got: its data (`read`), nothing because the source is not on this node (`absent`: no NVIDIA
    driver, no RDMA device, no dcgmi) or nothing because the source could not be read (`unavailable`: no
    permission, a command that failed, hung or answered in a shape it never has). The reason says which."""

    READ = "read"
    ABSENT = "absent"
    UNAVAILABLE = "unavailable"


STATES = ", ".join(s.value for s in SourceState)


# ---- a report's JSON, field by field -----------------------------------------------------------------------------


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _texts(value: object) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _ints(value: object) -> tuple[int, ...]:
    return tuple(v for v in value if _int(v) is not None) if isinstance(value, list) else ()


def _int_map(value: object) -> dict[str, int]:
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and _int(v) is not None}


def _text_map(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _brief(value: object) -> str:
    """A value named in a reason: a short scalar as written, anything else by its type."""
    if isinstance(value, str | int | float | bool) or value is None:
        return repr(value)[:40]
    return type(value).__name__


@dataclasses.dataclass(frozen=True, slots=True)
class _Head:
    """A record's JSON as far as every record shares it: its state and reason, or why it is of a wrong shape."""

    state: SourceState
    reason: str | None
    data: Mapping[str, Any]

    @classmethod
    def of(cls, data: object) -> _Head:
        if not isinstance(data, Mapping):
            return cls(SourceState.UNAVAILABLE, f"the record is not an object but {type(data).__name__}", {})
        try:
            state = SourceState(data.get("state"))
        except ValueError:
            return cls(
                SourceState.UNAVAILABLE, f"its state {_brief(data.get('state'))} is none of {STATES}", {}
            )
        return cls(state, _text(data.get("reason")), data)

    def entries(self, key: str) -> tuple[list[Mapping[str, Any]], str | None]:
        """The objects of a read record's list (any other entry left out), or why there is no list."""
        value = self.data.get(key)
        if not isinstance(value, list):
            return [], f"a read record whose {key} is {_brief(value) if key in self.data else 'missing'}"
        return [entry for entry in value if isinstance(entry, Mapping)], None


def _head(state: SourceState, reason: str | None) -> dict[str, Any]:
    return {"state": state.value, "reason": reason}


# ---- Xid errors --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class XidEvent:
    """One (GPU, Xid) of the kernel log: how many times, the first and last message and when, as the log stamped
    them. `pci` is the driver's `0000:3b:00`; `mig` its MIG attribution (`GPU-I:05 GPU-CI:00`)."""

    xid: int | None
    pci: str | None
    mig: str | None = None
    process: str | None = None
    message: str = ""
    count: int | None = 1  # None: a report's count that is no integer
    first_at: str | None = None
    last_at: str | None = None
    last_message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> XidEvent:
        return cls(
            xid=_int(data.get("xid")),
            pci=_text(data.get("pci")),
            mig=_text(data.get("mig")),
            process=_text(data.get("process")),
            message=_text(data.get("message")) or "",
            count=_int(data.get("count")),
            first_at=_text(data.get("first_at")),
            last_at=_text(data.get("last_at")),
            last_message=_text(data.get("last_message")) or "",
        )


@dataclasses.dataclass(frozen=True, slots=True)
class XidRecord:
    """The Xid errors NVIDIA's driver logged since boot: the command that gave the log (`source`), what of it was
    kept (`partial`: None, all of it), the events grouped, how many fell outside the groups kept (`left_out`), and the
    GPUs the driver lists (`driver_gpus`: None where its folder could not be listed)."""

    state: SourceState
    reason: str | None = None
    source: str | None = None
    partial: str | None = None
    events: tuple[XidEvent, ...] = ()
    left_out: int | None = None
    driver_gpus: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.state is not SourceState.READ:
            return _head(self.state, self.reason)
        out = {
            **_head(self.state, self.reason),
            "source": self.source,
            "partial": self.partial,
            "events": [e.to_dict() for e in self.events],
            "left_out": self.left_out,
        }
        return out if self.driver_gpus is None else {**out, "driver_gpus": list(self.driver_gpus)}

    @classmethod
    def from_dict(cls, data: object) -> XidRecord:
        head = _Head.of(data)
        if head.state is not SourceState.READ:
            return cls(head.state, head.reason)
        events, wrong = head.entries("events")
        if wrong is not None:
            return cls(SourceState.UNAVAILABLE, wrong)
        listed = head.data.get("driver_gpus")
        return cls(
            head.state,
            head.reason,
            source=_text(head.data.get("source")),
            partial=_text(head.data.get("partial")),
            events=tuple(XidEvent.from_dict(e) for e in events),
            left_out=_int(head.data.get("left_out")),
            driver_gpus=_texts(listed) if isinstance(listed, list) else None,
        )


# ---- PCIe AER ----------------------------------------------------------------------------------------------------

AER_KINDS = ("correctable", "nonfatal", "fatal")


@dataclasses.dataclass(frozen=True, slots=True)
class AerDevice:
    """One device's AER counters since boot: each kind's TOTAL_ERR_* count (None: not read, `unreadable` says why)
    and its non-zero counts by name (`counts[kind][name]`). `role` says why it was read (`nvidia gpu`, `rdma nic`,
    `port above <bdf>`); `pci_class` is the JSON's `class`."""

    bdf: str | None
    role: str | None
    vendor: str | None = None
    pci_class: str | None = None
    unreadable: Mapping[str, str] = dataclasses.field(default_factory=dict)
    counts: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    correctable: int | None = None
    nonfatal: int | None = None
    fatal: int | None = None

    def total(self, kind: str) -> int | None:
        """The count of one of AER_KINDS."""
        return {"correctable": self.correctable, "nonfatal": self.nonfatal, "fatal": self.fatal}.get(kind)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bdf": self.bdf,
            "role": self.role,
            "vendor": self.vendor,
            "class": self.pci_class,
            "unreadable": dict(self.unreadable),
            "counts": {kind: dict(names) for kind, names in self.counts.items()},
            "correctable": self.correctable,
            "nonfatal": self.nonfatal,
            "fatal": self.fatal,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AerDevice:
        counts = data.get("counts")
        return cls(
            bdf=_text(data.get("bdf")),
            role=_text(data.get("role")),
            vendor=_text(data.get("vendor")),
            pci_class=_text(data.get("class")),
            unreadable=_text_map(data.get("unreadable")),
            counts={
                k: _int_map(v) for k, v in counts.items() if isinstance(k, str) and isinstance(v, Mapping)
            }
            if isinstance(counts, Mapping)
            else {},
            correctable=_int(data.get("correctable")),
            nonfatal=_int(data.get("nonfatal")),
            fatal=_int(data.get("fatal")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class AerRecord:
    """AER counters of NVIDIA's devices, the RDMA NICs and the ports above them."""

    state: SourceState
    reason: str | None = None
    devices: tuple[AerDevice, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        if self.state is not SourceState.READ:
            return _head(self.state, self.reason)
        return {**_head(self.state, self.reason), "devices": [d.to_dict() for d in self.devices]}

    @classmethod
    def from_dict(cls, data: object) -> AerRecord:
        head = _Head.of(data)
        if head.state is not SourceState.READ:
            return cls(head.state, head.reason)
        devices, wrong = head.entries("devices")
        if wrong is not None:
            return cls(SourceState.UNAVAILABLE, wrong)
        return cls(head.state, head.reason, tuple(AerDevice.from_dict(d) for d in devices))


# ---- InfiniBand --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class IbPort:
    """One RDMA port as sysfs shows it: `state` `ACTIVE` (code 4), `phys_state` `LinkUp` (5), its rate as written
    and in Gb/s, its link layer (`InfiniBand`, `Ethernet`), each counter read and each attribute that was not."""

    device: str | None
    port: int | str | None
    state_code: int | None = None
    state: str | None = None
    phys_state_code: int | None = None
    phys_state: str | None = None
    rate: str | None = None
    rate_gbps: float | None = None
    link_layer: str | None = None
    counters: Mapping[str, int] = dataclasses.field(default_factory=dict)
    unreadable: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def is_up(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**out, "counters": dict(self.counters), "unreadable": dict(self.unreadable)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> IbPort:
        port = data.get("port")
        return cls(
            device=_text(data.get("device")),
            port=port if isinstance(port, str) else _int(port),
            state_code=_int(data.get("state_code")),
            state=_text(data.get("state")),
            phys_state_code=_int(data.get("phys_state_code")),
            phys_state=_text(data.get("phys_state")),
            rate=_text(data.get("rate")),
            rate_gbps=finite(data.get("rate_gbps")),
            link_layer=_text(data.get("link_layer")),
            counters=_int_map(data.get("counters")),
            unreadable=_text_map(data.get("unreadable")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class IbRecord:
    """Every RDMA port of the node."""

    state: SourceState
    reason: str | None = None
    ports: tuple[IbPort, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        if self.state is not SourceState.READ:
            return _head(self.state, self.reason)
        return {**_head(self.state, self.reason), "ports": [p.to_dict() for p in self.ports]}

    @classmethod
    def from_dict(cls, data: object) -> IbRecord:
        head = _Head.of(data)
        if head.state is not SourceState.READ:
            return cls(head.state, head.reason)
        ports, wrong = head.entries("ports")
        if wrong is not None:
            return cls(SourceState.UNAVAILABLE, wrong)
        return cls(head.state, head.reason, tuple(IbPort.from_dict(p) for p in ports))


# ---- DCGM --------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class DcgmTest:
    """One test's result on one entity (`GPU 0`; None: the test's summary): `Pass`, `Fail`, `Warn`, `Skip`,
    `Not Run`, with DCGM's warnings, their error ids and its info lines."""

    category: str
    test: str
    entity: str | None = None
    status: str = ""
    warnings: tuple[str, ...] = ()
    error_ids: tuple[int, ...] = ()
    info: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "test": self.test,
            "entity": self.entity,
            "status": self.status,
            "warnings": list(self.warnings),
            "error_ids": list(self.error_ids),
            "info": list(self.info),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DcgmTest:
        return cls(
            category=_text(data.get("category")) or "",
            test=_text(data.get("test")) or "",
            entity=_text(data.get("entity")),
            status=_text(data.get("status")) or "",
            warnings=_texts(data.get("warnings")),
            error_ids=_ints(data.get("error_ids")),
            info=_texts(data.get("info")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class DcgmRecord:
    """`dcgmi diag -r 1`'s results. `returncode` is dcgmi's exit status where it answered with JSON (`answered`:
    the record then carries it, read or not), None where it did not run or printed none."""

    state: SourceState
    reason: str | None = None
    version: str | None = None
    tests: tuple[DcgmTest, ...] = ()
    returncode: int | None = None
    answered: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = _head(self.state, self.reason)
        if self.state is SourceState.READ:
            out.update(version=self.version, tests=[t.to_dict() for t in self.tests])
        return {**out, "returncode": self.returncode} if self.answered else out

    @classmethod
    def from_dict(cls, data: object) -> DcgmRecord:
        head = _Head.of(data)
        answered = "returncode" in head.data
        returncode = _int(head.data.get("returncode"))
        if head.state is not SourceState.READ:
            return cls(head.state, head.reason, returncode=returncode, answered=answered)
        tests, wrong = head.entries("tests")
        if wrong is not None:
            return cls(SourceState.UNAVAILABLE, wrong)
        return cls(
            head.state,
            head.reason,
            version=_text(head.data.get("version")),
            tests=tuple(DcgmTest.from_dict(t) for t in tests),
            returncode=returncode,
            answered=answered,
        )


# ---- all of them -------------------------------------------------------------------------------------------------

SourceRecord: TypeAlias = XidRecord | AerRecord | IbRecord | DcgmRecord


@dataclasses.dataclass(frozen=True, slots=True)
class NodeRecords:
    """The hardware section's `node_records`: each source's record, None where the report has none (a report
    written before a source was read, or a hardware dict that names only some)."""

    xid: XidRecord | None = None
    aer: AerRecord | None = None
    ib: IbRecord | None = None
    dcgm: DcgmRecord | None = None

    def sources(self) -> Iterator[tuple[str, SourceRecord]]:
        """(name, record) of each source the records hold, in the order they are judged and written."""
        for name in ("xid", "aer", "ib", "dcgm"):
            record: SourceRecord | None = getattr(self, name)
            if record is not None:
                yield name, record

    def to_dict(self) -> dict[str, Any]:
        return {name: record.to_dict() for name, record in self.sources()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeRecords:
        """A report's `node_records` (a key it lacks is None; any other key, a newer writer's source, is not
        read)."""
        return cls(
            xid=XidRecord.from_dict(data["xid"]) if "xid" in data else None,
            aer=AerRecord.from_dict(data["aer"]) if "aer" in data else None,
            ib=IbRecord.from_dict(data["ib"]) if "ib" in data else None,
            dcgm=DcgmRecord.from_dict(data["dcgm"]) if "dcgm" in data else None,
        )

    @classmethod
    def of(cls, value: object) -> NodeRecords | None:
        """The records of a hardware section's `node_records`, None where it holds none (an older report) or no
        object."""
        return cls.from_dict(value) if isinstance(value, Mapping) else None

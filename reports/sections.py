"""A report's sections as types: the environment, the hardware with each GPU's NVML reading, each node of a
multi-node run, each `--with` stack. Renderers, `diff` and `fleet` read attributes, so a renamed field is an
error where it is read (and in the type checker), never a silent `n/a`.

Each section round-trips to the JSON the schema describes: `from_dict(d).to_dict() == d` for what ds-doctor
writes. Keys a section does not know (a newer writer's) are kept in `extra` and written back unchanged.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, TypeVar

from ds_doctor.reports.noderecords import NodeRecords

T = TypeVar("T")


def _kept(out: dict[str, Any], present: tuple[str, ...]) -> dict[str, Any]:
    """What a section read from JSON writes back: the keys it was read with (a missing one stays missing)."""
    return {k: v for k, v in out.items() if k in present} if present else out


def _split(cls: type, data: Mapping[str, Any], renamed: Mapping[str, str] | None = None) -> tuple[dict, dict]:
    """(the fields of `cls` found in `data`, everything else); `renamed` maps a JSON key to its field."""
    renamed = renamed or {}
    names = {f.name for f in dataclasses.fields(cls)} - {"extra", "present"}
    known, extra = {}, {}
    for key, value in data.items():
        field = renamed.get(key, key)
        if field in names:
            known[field] = value
        else:
            extra[key] = value
    return known, extra


@dataclasses.dataclass(frozen=True)
class GpuReading:
    """One GPU as NVML read it (`ds_doctor.hardware.nvml`); a field NVML refused is None, with its reason in
    `unavailable`."""

    index: int
    unavailable: Mapping[str, str] = dataclasses.field(default_factory=dict)
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    compute_capability: str | None = None
    ecc_enabled: bool | None = None
    ecc_enabled_pending: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    throttle_mask: int | None = None
    throttle_reasons: tuple[str, ...] | None = None
    utilization_gpu_pct: int | None = None
    utilization_memory_pct: int | None = None
    temperature_c: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    clock_sm_mhz: int | None = None
    clock_sm_max_mhz: int | None = None
    clock_mem_mhz: int | None = None
    clock_mem_max_mhz: int | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlink: tuple[Mapping[str, Any], ...] | None = None
    processes: tuple[Mapping[str, Any], ...] | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    # the keys the reading had: written back, no more (a GPU NVML could not open has two)
    present: tuple[str, ...] = ()
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuReading:
        known, extra = _split(cls, data)
        for key in ("throttle_reasons", "nvlink", "processes"):
            if isinstance(known.get(key), list):
                known[key] = tuple(known[key])
        known.pop("present", None)
        return cls(**known, present=tuple(k for k in data if k not in extra), extra=extra)

    @classmethod
    def of(cls, gpu: GpuReading | Mapping[str, Any]) -> GpuReading:
        return gpu if isinstance(gpu, GpuReading) else cls.from_dict(gpu)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in self.present or [
            f.name for f in dataclasses.fields(self) if f.name not in ("present", "extra")
        ]:
            value = getattr(self, key)
            out[key] = (
                list(value) if isinstance(value, tuple) else dict(value) if key == "unavailable" else value
            )
        return {**out, **self.extra}


@dataclasses.dataclass(frozen=True)
class EnvSection:
    """The software: Python, the packages that matter, CUDA and NCCL as torch was built, the driver, the relevant
    variables (redacted), and pairs of packages outside each other's declared ranges."""

    python: str | None = None
    executable: str | None = None
    platform: str | None = None
    packages: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    version_skew: tuple[Mapping[str, Any], ...] = ()
    cuda: str | None = None
    nccl: str | None = None
    driver: str | None = None
    cuda_driver: str | None = None
    variables: Mapping[str, str] = dataclasses.field(default_factory=dict)
    present: tuple[str, ...] = ()  # read from JSON: the keys it had, written back and no more
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def build_words(self) -> dict[str, str]:
        """torch's CUDA, the NCCL wheel, the driver and its CUDA, each absent one said in words (never `None`, which a
        reader takes for a value): what `ds-doctor env` and the ticket's environment table show."""
        if self.cuda or "torch" not in self.packages:
            cuda = self.cuda or "unknown"
        else:
            cuda = "none (a build without CUDA)" if self.packages["torch"] else "torch not installed"
        return {
            "cuda": cuda,
            "nccl": self.nccl or "no NCCL wheel",
            "driver": self.driver or "none found",
            "cuda_driver": self.cuda_driver or "none found",
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvSection:
        known, extra = _split(cls, data)
        known["version_skew"] = tuple(known.get("version_skew") or ())
        known["packages"] = dict(known.get("packages") or {})
        known["variables"] = dict(known.get("variables") or {})
        return cls(**known, present=tuple(k for k in data if k not in extra), extra=extra)

    def to_dict(self) -> dict[str, Any]:
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("extra", "present")
        }
        out.update(
            packages=dict(self.packages),
            variables=dict(self.variables),
            version_skew=[dict(pair) for pair in self.version_skew],
        )
        return {**_kept(out, self.present), **self.extra}


@dataclasses.dataclass(frozen=True)
class HardwareSection:
    """The host: its name, CPUs, memory and GPUs (none, with the reason, on a CPU node)."""

    host: str | None = None
    cpus: int | None = None
    memory_bytes: int | None = None
    gpus: tuple[GpuReading, ...] = ()
    gpus_reason: str | None = None
    present: tuple[str, ...] = ()  # read from JSON: the keys it had, written back and no more
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def node_records(self) -> NodeRecords | None:
        """The node's fault records as types, read once from the JSON kept in `extra` (which is written back as
        it was read); None where the section has none (a report from before they were read)."""
        return NodeRecords.of(self.extra.get("node_records"))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HardwareSection:
        known, extra = _split(cls, data)
        known["gpus"] = tuple(
            GpuReading.of(g) for g in known.get("gpus") or () if isinstance(g, Mapping | GpuReading)
        )
        return cls(**known, present=tuple(k for k in data if k not in extra), extra=extra)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "host": self.host,
            "cpus": self.cpus,
            "memory_bytes": self.memory_bytes,
            "gpus": [g.to_dict() for g in self.gpus],
            "gpus_reason": self.gpus_reason,
        }
        return {**_kept(out, self.present), **self.extra}


@dataclasses.dataclass(frozen=True)
class NodeSection:
    """One node of a multi-node run: its rank, host, and its own environment and hardware."""

    node: int
    host: str
    env: EnvSection = EnvSection()
    hardware: HardwareSection = HardwareSection()
    # which sections it held (a node that never said writes neither)
    has: tuple[str, ...] = ("env", "hardware")
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeSection:
        known, extra = _split(cls, data)
        known.pop("has", None)
        env, hardware = data.get("env"), data.get("hardware")
        return cls(
            node=int(known["node"]),
            host=str(known["host"]),
            env=EnvSection.from_dict(env) if isinstance(env, Mapping) else EnvSection(),
            hardware=HardwareSection.from_dict(hardware)
            if isinstance(hardware, Mapping)
            else HardwareSection(),
            has=tuple(k for k in ("env", "hardware") if isinstance(data.get(k), Mapping)),
            extra=extra,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"node": self.node, "host": self.host}
        if "env" in self.has:
            out["env"] = self.env.to_dict()
        if "hardware" in self.has:
            out["hardware"] = self.hardware.to_dict()
        return {**out, **self.extra}


@dataclasses.dataclass(frozen=True)
class StackSection:
    """A stack the cases ran on (`run --with`): `installed`, or an overlay with the releases it adds."""

    name: str
    packages: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    releases: tuple[str, ...] = ()  # JSON: "with"
    path: str | None = None
    ignored_pins: tuple[str, ...] = ()
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StackSection:
        known, extra = _split(cls, data, {"with": "releases"})
        return cls(
            name=str(known["name"]),
            packages=dict(known.get("packages") or {}),
            releases=tuple(known.get("releases") or ()),
            path=known.get("path"),
            ignored_pins=tuple(known.get("ignored_pins") or ()),
            extra=extra,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "with": list(self.releases),
            "packages": dict(self.packages),
            "path": self.path,
        }
        if self.ignored_pins:
            out["ignored_pins"] = list(self.ignored_pins)
        return {**out, **self.extra}


def section(cls: type[T], value: Any) -> T:
    """`value` as section `cls`: a section already, or its dict (what a report's JSON, a test or the engine
    hands over)."""
    if isinstance(value, cls):
        return value
    return cls.from_dict(value if isinstance(value, Mapping) else {})  # type: ignore[attr-defined]

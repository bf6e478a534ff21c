"""The probe registry: the built-in families (`ds_doctor.probes.PROBE_MODULES`), probes other packages register through
the entry-point group `ds_doctor.probes` (pytest's plugin convention), and `DS_DOCTOR_EXTRA_PROBES`.

Every source yields probe modules with the same protocol (`ds_doctor.probe.spec.Probe`); a name used twice is an
error that names both. Loading a probe imports it, which registers what it declares beside its spec: a new measure
(`ds_doctor.reports.measures.register_measure`) or scenario (`ds_doctor.probe.spec.register_scenario`), so every
process that loads the registry (the parent that renders, each rank that measures) knows them. A probe's variants
may depend on the run's options (`variants(options)`: the user's configs add cases); a rank expands them with the
options its launch directory holds, never from its environment.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import os
import re
from importlib import metadata
from typing import Any

from ds_doctor.probe.rankoptions import RankOptions
from ds_doctor.probe.spec import Case, Probe, ProbeSpec, Variant

ENTRY_POINT_GROUP = "ds_doctor.probes"
#: Comma-separated extra probe modules (the tests' fault probes, or a site's own probes).
EXTRA_ENV = "DS_DOCTOR_EXTRA_PROBES"


class RegistryError(RuntimeError):
    """Two probes with one name, or a probe that does not load."""


class PluginError(RegistryError):
    """The same, of a probe the user's environment named (DS_DOCTOR_EXTRA_PROBES) or an installed package's entry
    point registers: theirs to fix, so the CLI says it in one line and exits 2 (a built-in's is the doctor's bug)."""


#: what the user can do about a probe of each origin that is not built in
_REMEDY = {
    EXTRA_ENV: f"fix or unset {EXTRA_ENV}",
    "entry point": "reinstall or uninstall the package that registers it",
}


def _error(origin: str, message: str, *others: str) -> RegistryError:
    """A built-in probe's failure is the doctor's (RegistryError); one that involves a probe from elsewhere is the
    user's (PluginError), with what to do about it."""
    outside = [o for o in (origin, *others) if o != "built-in"]
    if not outside:
        return RegistryError(message)
    remedy = next((r for key, r in _REMEDY.items() if key in outside[0]), "")
    return PluginError(f"{message}: {remedy}" if remedy else message)


@functools.cache
def entry_point_probes() -> tuple[tuple[str, str], ...]:
    """The installed packages' probes; read once per process (a scan of every installed distribution)."""
    return tuple(
        (f"entry point {ep.name} ({ep.group})", ep.value)
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)
    )


def sources() -> list[tuple[str, str]]:
    """(where it came from, module path) for every probe: built-ins, entry points, then the environment."""
    from ds_doctor import probes

    found = [("built-in", name) for name in probes.PROBE_MODULES]
    found += entry_point_probes()
    found += [(EXTRA_ENV, name.strip()) for name in os.environ.get(EXTRA_ENV, "").split(",") if name.strip()]
    return found


def _load(origin: str, dotted: str) -> Probe:
    """`package.module`, or `package.module:attribute` for a probe object inside a module."""
    module_name, _, attribute = dotted.partition(":")
    try:
        module: Any = importlib.import_module(module_name)
        if attribute:
            module = getattr(module, attribute)
    # ValueError: a spec or a declaration (`register_measure`, `register_scenario`) the module makes on import refused
    except (ImportError, AttributeError, ValueError) as exc:
        raise _error(
            origin, f"probe {dotted!r} ({origin}) does not load: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(getattr(module, "SPEC", None), ProbeSpec) or not callable(getattr(module, "run", None)):
        raise _error(
            origin,
            f"{dotted!r} ({origin}) is not a probe: it needs SPEC (a ProbeSpec), variants() and run(ctx)",
        )
    return module


@functools.cache
def _modules(key: tuple[tuple[str, str], ...]) -> dict[str, Probe]:
    modules: dict[str, Probe] = {}
    origins: dict[str, tuple[str, str]] = {}
    for origin, dotted in key:
        module = _load(origin, dotted)
        name = module.SPEC.name
        if name in modules and modules[name] is not module:
            first, first_origin = origins[name]
            message = f"duplicate probe name {name!r}: {dotted} ({origin}) and {first} ({first_origin})"
            raise _error(origin, message, first_origin)
        modules[name], origins[name] = module, (dotted, origin)
    return modules


def load_modules() -> dict[str, Probe]:
    """Probe modules by name, in registration order."""
    return _modules(tuple(sources()))


def specs() -> list[ProbeSpec]:
    return [module.SPEC for module in load_modules().values()]


def get(name: str) -> Probe:
    """The probe called `name`; an unknown name lists the valid ones."""
    modules = load_modules()
    if name not in modules:
        raise KeyError(f"unknown probe {name!r}; known probes: {', '.join(sorted(modules))}")
    return modules[name]


#: (nodes, ranks per node) of a multi-node run
Shape = tuple[int, int]


def variants_of(module: Probe, options: RankOptions | None = None) -> list[Variant]:
    """A probe's variants for a run with `options`: `variants(options)` where the probe takes them (the built-in
    families whose cases come from the user's configs), `variants()` otherwise."""
    function: Any = module.variants
    try:
        takes_options = bool(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        takes_options = False
    return list(function(options or RankOptions()) if takes_options else function())


def cases_of(
    module: Probe,
    node_world_size: int | None = None,
    across: Shape | None = None,
    options: RankOptions | None = None,
) -> list[Case]:
    """A probe's cases: each variant at each world size (the node's too, for `scale_to_node` probes), and in a
    multi-node run the variants it names in `across_nodes` at the whole world size, spanning every node."""
    spec: ProbeSpec = module.SPEC
    variants = variants_of(module, options)
    cases = [
        case_of(spec, variant, world_size)
        for variant in variants
        for world_size in spec.world_sizes_for(node_world_size)
    ]
    if across is not None:
        nodes, per_node = across
        cases += [
            case_of(spec, variant, nodes * per_node, nodes)
            for variant in variants
            if spec.runs_across_nodes(variant.name)
        ]
    return cases


def case_of(spec: ProbeSpec, variant: Variant, world_size: int, nodes: int = 1) -> Case:
    """One variant of a probe at one world size (spanning `nodes` nodes)."""
    return Case(
        probe=spec.name,
        scenario=spec.scenario,
        variant=variant.name,
        world_size=world_size,
        level=variant.level,
        params=variant.params,
        reproduce=variant.reproduce,
        nodes=nodes,
        alone=spec.alone if variant.alone is None else variant.alone,
    )


def all_cases(
    node_world_size: int | None = None, across: Shape | None = None, options: RankOptions | None = None
) -> list[Case]:
    cases = [
        case
        for module in load_modules().values()
        for case in cases_of(module, node_world_size, across, options)
    ]
    ids = [case.id for case in cases]
    if len(ids) != len(set(ids)):
        raise RegistryError("duplicate case ids in the registry")
    return cases


def find_case(case_id: str, options: RankOptions | None = None) -> Case:
    """A case by id; a node-scaled or multi-node one is found from the world size (and nodes) its id carries."""
    match = re.search(r"-ws(\d+)(?:-n(\d+))?\]$", case_id)
    world_size, nodes = (int(match.group(1)), int(match.group(2) or 1)) if match else (None, 1)
    across = (nodes, world_size // nodes) if world_size and nodes > 1 else None
    for case in all_cases(world_size if nodes == 1 else None, across, options):
        if case.id == case_id:
            return case
    raise KeyError(f"unknown case {case_id!r}")


def resolve(entry: CaseEntry, options: RankOptions) -> Case:
    """A case a launch file names (probe, variant, world size, nodes), with the params its probe's variant has under
    the launch's `options`: no search of the registry, and nothing read from the rank's environment."""
    module = get(entry.probe)
    for variant in variants_of(module, options):
        if variant.name == entry.variant:
            return case_of(module.SPEC, variant, entry.world_size, entry.nodes)
    raise KeyError(f"probe {entry.probe!r} has no variant {entry.variant!r} under this launch's options")


@dataclasses.dataclass(frozen=True)
class CaseEntry:
    """One case as a launch file names it."""

    probe: str
    variant: str
    world_size: int
    nodes: int = 1

    @classmethod
    def of(cls, case: Case) -> CaseEntry:
        return cls(case.probe, case.variant, case.world_size, case.nodes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> CaseEntry:
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("probe"), str)
            or not isinstance(data.get("variant"), str)
            or not isinstance(data.get("world_size"), int)
        ):
            raise ValueError(f"not a case entry: {str(data)[:200]}")
        return cls(data["probe"], data["variant"], data["world_size"], int(data.get("nodes", 1)))

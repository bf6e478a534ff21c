"""What a probe declares: a frozen spec, its variants, the cases they expand to, and the scenarios a spec names.

A probe is a module (or any object) with `SPEC` (a `ProbeSpec`), `variants()` returning `Variant`s, `run(ctx)`
and optionally `setup(ctx)` (one-off work per launch) and `prepare(rank)` (at the launch's start, before the process
group: work that can run beside the start-up, such as a helper process's imports). Probe authors import these
through `ds_doctor.plugins`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.machinery
import importlib.util
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

DEVICE_KINDS = ("cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A class of failure a probe guards against, as a user meets it (the README's S0-S4), or `smoke`: a spec's
    `scenario` names one."""

    name: str
    description: str


_REGISTERED: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "S0", "Accelerate with a DeepSpeed config: a placeholder optimizer or scheduler survives prepare"
        ),
        Scenario("S1", "a DeepSpeed checkpoint or hook loses track of parameters moved, replaced or wrapped"),
        Scenario("S2", "ZeRO with CPU offload: gradients or optimizer state on two devices"),
        Scenario("S3", "after wrapping, the optimizer tracks parameters that were frozen or left out"),
        Scenario("S4", "after a load, an optimizer's state stays on the wrong device"),
        Scenario(
            "smoke", "the stack and the hardware do what they promise: collectives, matmuls, equivalence"
        ),
    )
}
#: Every known scenario by name: the built-in ones, then those registered. A read-only view of the registry (it sees
#: what is registered later); add to it with `register_scenario`.
SCENARIOS: Mapping[str, Scenario] = types.MappingProxyType(_REGISTERED)


def register_scenario(scenario: Scenario) -> Scenario:
    """Add `scenario` to the registry and return it: a probe that guards a new class of failure declares it beside
    (before) its spec, `S5 = register_scenario(Scenario("S5", ...))`, `ProbeSpec(scenario=S5.name, ...)`. The same
    scenario registered again is a no-op; another under a known name is refused, naming both."""
    known = _REGISTERED.get(scenario.name)
    if known is not None and known != scenario:
        raise ValueError(f"scenario {scenario.name!r} is already registered as {known}; not as {scenario}")
    _REGISTERED[scenario.name] = scenario
    return scenario


@contextlib.contextmanager
def registered_scenarios(*scenarios: Scenario) -> Iterator[tuple[Scenario, ...]]:
    """`scenarios` registered for the time of a `with` block (a test's), then the registry as it was."""
    before = dict(_REGISTERED)
    try:
        yield tuple(register_scenario(s) for s in scenarios)
    finally:
        _REGISTERED.clear()
        _REGISTERED.update(before)


@dataclasses.dataclass(frozen=True)
class Requirement:
    """An optional package a probe needs: found with find_spec, never imported to find out."""

    module: str
    pip: str

    @property
    def install_line(self) -> str:
        return f"pip install {self.pip}"


def _found(module: str, overlays: Sequence[str]) -> bool:
    top = module.split(".")[0]
    return importlib.util.find_spec(module) is not None or (
        bool(overlays) and importlib.machinery.PathFinder.find_spec(top, list(overlays)) is not None
    )


def missing_install_lines(requirements: Iterable[Requirement], overlays: Sequence[str] = ()) -> list[str]:
    """Install lines of the requirements not installed here (nor in any of the `overlays` folders, `--with`'s,
    whose cases the ranks import first)."""
    return [req.install_line for req in requirements if not _found(req.module, overlays)]


def missing_dependency(requirements: Iterable[Requirement], overlays: Sequence[str] = ()) -> str | None:
    """The skip reason for requirements not installed here, or None when all are."""
    lines = missing_install_lines(requirements, overlays)
    return "missing optional dependency: " + "; ".join(lines) if lines else None


@dataclasses.dataclass(frozen=True)
class ProbeSpec:
    name: str
    scenario: str
    description: str
    world_sizes: tuple[int, ...] = (1, 2)
    device_kinds: tuple[str, ...] = DEVICE_KINDS
    requires: tuple[Requirement, ...] = ()
    timeout_s: float = 120.0
    setup_timeout_s: float = 600.0  # one-off work per launch, e.g. JIT-building DeepSpeed ops
    known_issues: tuple[str, ...] = ()
    #: Also run at the node's world size (all its GPUs, or --nproc): the hardware families, where
    #: an 8-GPU node must be measured at 8 ranks, not only at the declared ones.
    scale_to_node: bool = False
    #: Variants (names, or "*" for all) that a multi-node run also runs across every node, at the whole world size.
    across_nodes: tuple[str, ...] = ()
    #: Its cases time something or fill memory: where a run's launches overlap (`ds_doctor.run.groups`), they run
    #: only while every other launch of the run waits, so no other work shares the node's cores, memory or GPUs (a
    #: variant may say otherwise: `Variant.alone`).
    alone: bool = False
    #: Its cases load DeepSpeed's JIT-built ops: the run builds them before its launches (`ds_doctor.ops`), never
    #: under a case's clock. A probe that requires `deepspeed` needs them too (`init_distributed` loads the CPU comm).
    deepspeed_ops: bool = False

    def needs_deepspeed_ops(self) -> bool:
        return self.deepspeed_ops or any(r.module == "deepspeed" for r in self.requires)

    def runs_across_nodes(self, variant: str) -> bool:
        return "*" in self.across_nodes or variant in self.across_nodes

    def world_sizes_for(self, node_world_size: int | None) -> tuple[int, ...]:
        """The declared world sizes, plus the node's where the probe scales to it."""
        if (
            self.scale_to_node
            and node_world_size
            and node_world_size > 1
            and node_world_size not in self.world_sizes
        ):
            return tuple(sorted((*self.world_sizes, node_world_size)))
        return self.world_sizes

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(
                f"{self.name}: scenario {self.scenario!r} is not registered (known: {', '.join(SCENARIOS)}); a new "
                "one is declared before the spec with register_scenario(Scenario(name, description))"
            )
        if not self.world_sizes and not self.across_nodes:
            raise ValueError(f"{self.name}: no world size, and it does not run across nodes")
        if self.world_sizes and min(self.world_sizes) < 1:
            raise ValueError(f"{self.name}: world sizes must be >= 1, got {self.world_sizes}")


@dataclasses.dataclass(frozen=True)
class Variant:
    """One configuration of a probe; it runs at each of the probe's world sizes.

    `params` is the probe's own small frozen dataclass (its fields are the variant's knobs); the probe
    reads it back from `ctx.params`.
    """

    name: str
    params: Any = None
    level: int = 3  # 2: the family's representative case, 3: every other case
    reproduce: bool = False  # reproduces a known issue on purpose: xfail / xpass
    alone: bool | None = None  # None: as the probe's `ProbeSpec.alone` says


@dataclasses.dataclass(frozen=True)
class Case:
    probe: str
    scenario: str
    variant: str
    world_size: int
    level: int
    params: Any = dataclasses.field(default=None, compare=False, hash=False)
    reproduce: bool = False
    nodes: int = 1  # > 1: the ranks span this many nodes
    alone: bool = dataclasses.field(default=False, compare=False)  # its variant's, else its probe's `alone`

    @property
    def id(self) -> str:
        across = f"-n{self.nodes}" if self.nodes > 1 else ""
        return f"{self.probe}[{self.variant}-ws{self.world_size}{across}]"


class Probe(Protocol):
    """What the registry loads: a module (or object) with these names; `setup(ctx)` and `prepare(rank)` are
    optional."""

    SPEC: ProbeSpec

    def variants(self) -> list[Variant]: ...

    def run(self, ctx: Any) -> None: ...

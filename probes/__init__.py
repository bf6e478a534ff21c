"""The probe registry: an explicit list of probe modules.

A probe module defines `SPEC` (a `ProbeSpec`), `variants()`, `run(ctx)` and optionally
`setup(ctx)` (one-off work per launch). Importing a probe module must stay cheap: heavy
imports live inside `setup`/`run`.
"""

from __future__ import annotations

import importlib
import os
import re
from types import ModuleType

from probes.base import Case, ProbeSpec

PROBE_MODULES = (
    "probes.zero_offload",
    "probes.frozen_param_names",
    "probes.accelerate_deepspeed_lifecycle",
    "probes.optimizer_coverage",
    "probes.optimizer_state_placement",
    "probes.comm",
    "probes.compute",
)

#: Comma-separated extra probe modules (the tests' fault probes, or a site's own probes); the
#: variable reaches the torchrun workers through the environment, so both sides see one registry.
EXTRA_ENV = "DS_DOCTOR_EXTRA_PROBES"


def module_names() -> tuple[str, ...]:
    extra = tuple(name.strip() for name in os.environ.get(EXTRA_ENV, "").split(",") if name.strip())
    return PROBE_MODULES + extra


def load_modules() -> dict[str, ModuleType]:
    modules: dict[str, ModuleType] = {}
    for dotted in module_names():
        module = importlib.import_module(dotted)
        name = module.SPEC.name
        if name in modules:
            raise RuntimeError(f"duplicate probe name {name!r} in {dotted}")
        modules[name] = module
    return modules


def specs() -> list[ProbeSpec]:
    return [module.SPEC for module in load_modules().values()]


def get(name: str) -> ModuleType:
    """The probe module called `name`; an unknown name lists the valid ones."""
    modules = load_modules()
    if name not in modules:
        raise KeyError(f"unknown probe {name!r}; known probes: {', '.join(sorted(modules))}")
    return modules[name]


def cases_of(module: ModuleType, node_world_size: int | None = None) -> list[Case]:
    """A probe's cases: each variant at each world size (the node's too, for `scale_to_node` probes)."""
    spec: ProbeSpec = module.SPEC
    return [
        Case(
            probe=spec.name,
            scenario=spec.scenario,
            variant=variant.name,
            world_size=world_size,
            level=variant.level,
            params=dict(variant.params),
            reproduce=variant.reproduce,
        )
        for variant in module.variants()
        for world_size in spec.world_sizes_for(node_world_size)
    ]


def all_cases(node_world_size: int | None = None) -> list[Case]:
    cases = [case for module in load_modules().values() for case in cases_of(module, node_world_size)]
    ids = [case.id for case in cases]
    if len(ids) != len(set(ids)):
        raise RuntimeError("duplicate case ids in the registry")
    return cases


def find_case(case_id: str) -> Case:
    """A case by id; a node-scaled one is found from the world size its id carries."""
    match = re.search(r"-ws(\d+)\]$", case_id)
    for case in all_cases(int(match.group(1)) if match else None):
        if case.id == case_id:
            return case
    raise KeyError(f"unknown case {case_id!r}")

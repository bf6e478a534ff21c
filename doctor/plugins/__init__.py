"""The probe author's API: everything a probe needs to declare itself and report what it found.

A probe is a module (or an object) with `SPEC`, `variants()`, `run(ctx)` and optionally `setup(ctx)`:

    from dataclasses import dataclass
    from ds_doctor.plugins import Finding, ProbeContext, ProbeSpec, Severity, Variant
    from ds_doctor.plugins.requirements import TORCH

    SPEC = ProbeSpec(name="my_probe", scenario="smoke", description="...", requires=(TORCH,))

    @dataclass(frozen=True)
    class Params:
        size: int

    def variants() -> list[Variant]:
        return [Variant("small", Params(size=8), level=2)]

    def run(ctx: ProbeContext) -> None:
        params: Params = ctx.params
        ...
        ctx.add_findings([Finding("my_invariant", Severity.ERROR, "what broke", expected="what should hold")])

(`ctx.check(findings)`, the name this API first gave `add_findings`, still works and warns: it is deprecated.)

A number the built-in measures do not name, and a class of failure the built-in scenarios do not, are declared beside
the spec, as a built-in family would: `register_measure(Measure("step_ms", "step", "ms", "...", better="lower"))`,
`register_scenario(Scenario("S5", "..."))` before `SPEC` (`ProbeSpec(scenario="S5", ...)`). They are registered when
the probe registry imports the probe, and the reports read their units and better direction from the registry.
`Wrapper` names what wraps a model (DDP, FSDP, DeepSpeed, Accelerate, the Trainer, ...) and
`ds_doctor.plugins.requirements` the optional packages (`TORCH`, `DEEPSPEED`, `ACCELERATE`, `TRANSFORMERS`, ...).

What the reports draw of a case beyond its findings and measures is a view (`ds_doctor.reports.views`): a probe
publishes one by writing the note the view's type names, `ctx.note(StepTable.NOTE, {"tolerance": ..., "steps": [...]})`
(`ModelNote`, `DeepSpeedConfigNote`, `AccelerateConfigNote` alike); `ctx.measure_row(bytes=..., busbw_gbps=...)` rows
are a bandwidth curve.

Register it from another package through the entry-point group `ds_doctor.probes`
(`my_probe = my_package.my_probe` under `[options.entry_points]`), or with `DS_DOCTOR_EXTRA_PROBES=my_package.my_probe`.
docs/writing-probes.md walks through a complete one, and through a family: a probe of several modules, a package
whose files have fixed roles (`probe.py` its spec and run, `cases.py` its variants, `routes.py` how each `Wrapper`
trains, ...; the registry entry is `my_package.my_family.probe`). ds-doctor's own families (`probes/`) use this
package and nothing else of ds-doctor: its submodules hold what they need beyond the core, `checks` (the invariants),
`collect` (what a probe records beyond `ctx.snapshot`), `usersetup` (the user's configs and model), `requirements`
(the optional packages) and `process` (a case that goes on in a process of its own, DeepSpeed's ops).
"""

from ds_doctor.knowledge.matching import RaisedError
from ds_doctor.probe.context import ProbeContext, SkipCase
from ds_doctor.probe.rankoptions import RankOptions
from ds_doctor.probe.registry import ENTRY_POINT_GROUP, EXTRA_ENV
from ds_doctor.probe.spec import SCENARIOS, ProbeSpec, Requirement, Scenario, Variant, register_scenario
from ds_doctor.probe.wrappers import Wrapper
from ds_doctor.reports.measures import MEASURES, Measure, register_measure
from ds_doctor.reports.model import Finding, Severity, TensorRecord
from ds_doctor.reports.views import AccelerateConfigNote, DeepSpeedConfigNote, ModelNote, StepTable

__all__ = [
    "ENTRY_POINT_GROUP",
    "EXTRA_ENV",
    "MEASURES",
    "SCENARIOS",
    "AccelerateConfigNote",
    "DeepSpeedConfigNote",
    "Finding",
    "Measure",
    "ModelNote",
    "ProbeContext",
    "ProbeSpec",
    "RaisedError",
    "RankOptions",
    "Requirement",
    "Scenario",
    "Severity",
    "SkipCase",
    "StepTable",
    "TensorRecord",
    "Variant",
    "Wrapper",
    "register_measure",
    "register_scenario",
]

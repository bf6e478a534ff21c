"""A probe registered by the bisect test only (DS_DOCTOR_EXTRA_PROBES): it checks what `dsd_bisect_demo` (a package
the test builds in several releases, one of them the first broken) computes, as a real family checks a library."""

from __future__ import annotations

from ds_doctor.plugins import Finding, ProbeContext, ProbeSpec, Requirement, Severity, Variant

SPEC = ProbeSpec(
    name="bisect_demo",
    scenario="smoke",
    description="dsd_bisect_demo's scale() is 1 (the bisect test's planted regression)",
    world_sizes=(1,),
    timeout_s=60.0,
    requires=(Requirement("dsd_bisect_demo", "dsd-bisect-demo"),),
)


def variants() -> list[Variant]:
    return [Variant("scale", None, level=2)]


def run(ctx: ProbeContext) -> None:
    import dsd_bisect_demo

    scale = dsd_bisect_demo.scale()
    if scale != 1.0:
        ctx.add_findings(
            [Finding("demo_scale", Severity.ERROR, f"scale() is {scale}, not 1", rank=ctx.rank, stage="run")]
        )

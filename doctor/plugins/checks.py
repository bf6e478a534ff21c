"""The invariants a probe checks its device maps and results with: each a pure function returning findings (the
built-in families use exactly these; docs/invariants.md says what each holds)."""

from ds_doctor.checks import collectives
from ds_doctor.checks.consistency import compare
from ds_doctor.checks.coverage import step_changes, tracked_live, tracked_set
from ds_doctor.checks.equivalence import (
    UNIT_ROUNDOFF,
    Gap,
    Tolerance,
    continuation_finding,
    divergence_finding,
    first_divergence,
    largest,
    missing_finding,
    not_restored,
    samples_finding,
    steps_finding,
    worst_ratio,
)
from ds_doctor.checks.fabric import fabric_findings, rounds
from ds_doctor.checks.identity import identity_invariants
from ds_doctor.checks.lifecycle import PreparedFacts, lifecycle_invariants, process_count_agreement
from ds_doctor.checks.placement import (
    BuiltOptimizer,
    ZeroPromise,
    grad_accum_dtype,
    optimizer_state_colocation,
    zero_invariants,
    zero_optimizer_built,
)
from ds_doctor.checks.structure import buffer_placement, ties_kept, zero3_hooks_own_state

__all__ = [
    "UNIT_ROUNDOFF",
    "BuiltOptimizer",
    "Gap",
    "PreparedFacts",
    "Tolerance",
    "ZeroPromise",
    "buffer_placement",
    "collectives",
    "compare",
    "continuation_finding",
    "divergence_finding",
    "fabric_findings",
    "first_divergence",
    "grad_accum_dtype",
    "identity_invariants",
    "largest",
    "lifecycle_invariants",
    "missing_finding",
    "not_restored",
    "optimizer_state_colocation",
    "process_count_agreement",
    "rounds",
    "samples_finding",
    "step_changes",
    "steps_finding",
    "ties_kept",
    "tracked_live",
    "tracked_set",
    "worst_ratio",
    "zero3_hooks_own_state",
    "zero_invariants",
    "zero_optimizer_built",
]

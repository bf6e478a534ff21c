"""The built-in probe families, in the order they run. Each module is a probe written against
`doctor.plugins` like any third-party probe; `doctor.probe.registry` loads them (and the probes other
packages register). Importing a probe module must stay cheap: heavy imports live inside `setup`/`run`.
"""

PROBE_MODULES = (
    "probes.consistency",  # first: the first case of every launch with more than one rank
    "probes.zero_offload",
    "probes.frozen_param_names",
    "probes.accelerate_deepspeed_lifecycle",
    "probes.coverage.probe",
    "probes.optimizer_state_placement",
    "probes.zero3_hooks",
    "probes.equivalence.probe",
    "probes.comm",
    "probes.compute",
    "probes.fabric",  # only across the nodes of a multi-node run
)

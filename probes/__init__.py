"""The built-in probe families, in the order they run. Each module is a probe written against
`ds_doctor.plugins` like any third-party probe; `ds_doctor.probe.registry` loads them (and the probes other
packages register). Importing a probe module must stay cheap: heavy imports live inside `setup`/`run`.
"""

PROBE_MODULES = (
    "ds_doctor.probes.consistency",  # first: the first case of every launch with more than one rank
    "ds_doctor.probes.zero_offload",
    "ds_doctor.probes.frozen_param_names",
    "ds_doctor.probes.accelerate_deepspeed_lifecycle",
    "ds_doctor.probes.coverage.probe",
    "ds_doctor.probes.optimizer_state_placement",
    "ds_doctor.probes.zero3_hooks",
    "ds_doctor.probes.equivalence.probe",
    "ds_doctor.probes.comm",
    "ds_doctor.probes.compute",
    "ds_doctor.probes.fabric",  # only across the nodes of a multi-node run
)

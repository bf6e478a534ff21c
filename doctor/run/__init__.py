"""Running cases: spec and registry, plan, launch under torchrun, the per-rank worker and its context, the run
directory, merging rank lines into case results, building the report, and the pipeline that strings them together."""

"""Running cases on one node or across nodes: spec, registry, plan, torchrun launch, the rank's worker, merge, report."""

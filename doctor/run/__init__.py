"""Running cases on one node or across nodes: plan, torchrun launch, blame, the rank's worker, merge, report."""

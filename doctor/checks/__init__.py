"""Checks: invariants and rules as pure functions over collected data, returning findings with their evidence."""

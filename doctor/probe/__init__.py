"""What a probe is to the engine: its spec, scenarios, registry, required packages, wrappers, options and context."""

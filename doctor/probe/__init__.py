"""What a probe is to the engine: its spec, the registry of probes, the run options and the context it runs in."""

"""The user's own setup: their model (built on each rank), DeepSpeed config and Accelerate config, checked and made runnable."""

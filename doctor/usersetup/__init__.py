"""The user's own setup: their model, DeepSpeed config and Accelerate config, checked and made runnable."""

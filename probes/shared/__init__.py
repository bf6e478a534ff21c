"""Helpers the built-in families share (DeepSpeed's ops, an Accelerate session, timing, the tiny models): not probes."""

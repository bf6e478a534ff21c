"""The optional packages probes need, declared once: a spec's `requires`, `ctx.require(...)` and a variant's own
package name these, never a `Requirement(...)` of their own, so a package's pip name is written in one place."""

from __future__ import annotations

from ds_doctor.probe.spec import Requirement

TORCH = Requirement("torch", "torch")
DEEPSPEED = Requirement("deepspeed", "deepspeed")
ACCELERATE = Requirement("accelerate", "accelerate")
#: Accelerate's DeepSpeed plugin checks the transformers version: a case on it needs transformers too
TRANSFORMERS = Requirement("transformers", "transformers")
#: Composer's Trainer: the `mosaicml` distribution installs the `composer` module
COMPOSER = Requirement("composer", "mosaicml")
PRODIGY = Requirement("prodigyopt", "prodigyopt")
PRODIGY_PLUS = Requirement("prodigyplus", "prodigy-plus-schedule-free")

__all__ = ["ACCELERATE", "COMPOSER", "DEEPSPEED", "PRODIGY", "PRODIGY_PLUS", "TORCH", "TRANSFORMERS"]

"""The optional packages a probe needs, each declared once (`SPEC.requires`, `ctx.require(...)`): the built-in
families name these and construct no `Requirement` of their own."""

from ds_doctor.probe.requirements import (
    ACCELERATE,
    COMPOSER,
    DEEPSPEED,
    PRODIGY,
    PRODIGY_PLUS,
    TORCH,
    TRANSFORMERS,
)

__all__ = ["ACCELERATE", "COMPOSER", "DEEPSPEED", "PRODIGY", "PRODIGY_PLUS", "TORCH", "TRANSFORMERS"]

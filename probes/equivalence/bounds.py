"""How far a correct route may lie from the reference beyond the per-step rounding term (docs/invariants.md,
"Equivalence"): two effects are larger than a few ulps of the value and are not bugs.

- Rounding, amplified. A route adds the same terms in another order (an all-reduce, ZeRO-3's own linear backward,
  a bucketed reduce-scatter): each gradient element moves by a few ulps *of the terms it adds*, which for an element
  that is a near-cancellation is many ulps of the element; Adam then divides each element by its own running RMS,
  so such an element's update can move by up to lr * delta_g / eps. No closed form knows the terms of every
  reduction inside an arbitrary model, so the reference measures it: it runs a second time in float64, and the
  distance of the fp32 reference from the float64 one is what fp32 rounding does to these parameters, this data
  and these steps, Adam's amplification and its carry into later steps included. A correct fp32 route rounds
  differently, not more: it lies within SHADOW_FACTOR times that distance of the fp32 reference (2 for the route and
  the reference each being that far from the exact run, 2 for the spread between one order of additions and another).
- DeepSpeed's Adam kernels compute the bias corrections in fp32 from fp32 betas (0.999 is 0.99900001287 there), so
  their update differs from torch's by a relative amount that follows from the betas alone (`kernel_epsilon`),
  allowed on the reference's summed update norms.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from ds_doctor.plugins.checks import UNIT_ROUNDOFF

SHADOW_FACTOR = 4.0


def fp32(value: float) -> float:
    """`value` rounded to the nearest float32."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def kernel_epsilon(betas: tuple[float, float]) -> float:
    """The relative difference of an Adam update computed with fp32 betas and fp32 bias corrections (DeepSpeed's
    FusedAdam / DeepSpeedCPUAdam) from one computed in double (torch): 1 - beta^t inherits the relative error of
    1 - fl32(beta) at every step; the update divides by the first correction and by the square root of the second."""
    b1, b2 = betas
    rel = [abs((1 - fp32(b)) - (1 - b)) / (1 - b) if b < 1 else 0.0 for b in (b1, b2)]
    return rel[0] + rel[1] / 2 + 4 * UNIT_ROUNDOFF["float32"]


def allowances(
    single: Sequence[Any], double: Sequence[Any], kernel: float, initial: dict[str, Any]
) -> list[dict[str, float]]:
    """Per step, each quantity's absolute allowance: SHADOW_FACTOR times the distance of the fp32 reference from the
    float64 one, plus (for the parameters) the kernel term on the reference's summed update norms. `single` and
    `double` are the two runs' StepRecords, `initial` the parameters before the first step."""
    import torch

    out: list[dict[str, float]] = []
    path = dict.fromkeys(initial, 0.0)
    previous = initial
    for s, d in zip(single, double, strict=True):
        extra = {"loss": SHADOW_FACTOR * abs(s.loss - d.loss)}
        if s.grad_norm is not None and d.grad_norm is not None:
            extra["grad_norm"] = SHADOW_FACTOR * abs(s.grad_norm - d.grad_norm)
        for name, value in s.params.items():
            here = value.double()
            path[name] = path.get(name, 0.0) + float(torch.linalg.vector_norm(here - previous[name].double()))
            extra[name] = (
                SHADOW_FACTOR * float(torch.linalg.vector_norm(here - d.params[name].double()))
                + kernel * path[name]
            )
        previous = s.params
        out.append(extra)
    return out

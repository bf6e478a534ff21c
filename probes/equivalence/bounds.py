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
- A gradient below the route's rounding (bf16 routes). A parameter whose exact gradient is a near-cancellation
  (a key projection's bias: softmax ignores a shift shared by every key, so its gradient is 0 in exact arithmetic)
  has a gradient of pure rounding noise in bf16, and Adam turns noise above its eps into a full step of about lr
  per element. The reference runs a third time in the route's dtype (the whole model in it: the harsher case) and
  its gradients' distance from the float64 run's is the route's error per element (`noise_allowances`); an element
  whose exact gradient is below ten times that is allowed Adam's largest move either way.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
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
    single: Sequence[Any],
    double: Sequence[Any],
    kernel: float,
    initial: dict[str, Any],
    noise: Sequence[dict[str, float]] | None = None,
) -> list[dict[str, float]]:
    """Per step, each quantity's absolute allowance: SHADOW_FACTOR times the distance of the fp32 reference from the
    float64 one, plus (for the parameters) the kernel term on the reference's summed update norms and, for a bf16
    route, `noise` (`noise_allowances`, per step). `single` and `double` are the two runs' StepRecords, `initial` the
    parameters before the first step."""
    import torch

    out: list[dict[str, float]] = []
    path = dict.fromkeys(initial, 0.0)
    previous = initial
    for step, (s, d) in enumerate(zip(single, double, strict=True)):
        rounding = noise[step] if noise is not None else {}
        extra = {"loss": SHADOW_FACTOR * abs(s.loss - d.loss)}
        if s.grad_norm is not None and d.grad_norm is not None:
            extra["grad_norm"] = SHADOW_FACTOR * abs(s.grad_norm - d.grad_norm)
        for name, value in s.params.items():
            here = value.double()
            path[name] = path.get(name, 0.0) + float(torch.linalg.vector_norm(here - previous[name].double()))
            extra[name] = (
                SHADOW_FACTOR * float(torch.linalg.vector_norm(here - d.params[name].double()))
                + kernel * path[name]
                + rounding.get(name, 0.0)
            )
        previous = s.params
        out.append(extra)
    return out


#: an element whose exact gradient is below the measured error per element over this may take its sign from the
#: rounding: the route adds in another order than the reference's run in its dtype, so its error on one element can
#: be several times that run's typical one (ZeRO-0 bf16 on Qwen2 flipped an element at 2.8 times it)
NOISE = 0.1


def adam_bound(betas: tuple[float, float]) -> float:
    """Adam's largest step per element, in units of lr (Kingma and Ba, section 2.1): (1 - b1) / sqrt(1 - b2) where
    that exceeds 1, else 1."""
    return max(1.0, (1 - betas[0]) / math.sqrt(1 - betas[1]))


#: an element's gradient error may be this many times the measured error per element (one element is not the mean)
SPREAD = 4.0


def noise_allowances(
    noisy: Sequence[dict[str, Any]],
    exact: Sequence[dict[str, Any]],
    rate: Callable[[int, str], float],
    betas: tuple[float, float],
    eps: float | None = None,
) -> list[dict[str, float]]:
    """Per step, each parameter's absolute allowance for elements stepped on a gradient below the route's rounding:
    `noisy` the gradients per step (by name) of the reference run once more in the route's dtype, `exact` the
    float64 run's, `rate(step, name)` the lr that parameter steps at (its group's). The first's distance from the
    second, spread over the tensor's
    elements, is the route's error per element; an element whose exact gradient is below it over NOISE may take its
    sign from the rounding, and Adam steps it by up to lr * adam_bound either way: 2 lr adam_bound * sqrt(such
    elements) from that step on (summed over steps).

    `eps` (Adam's): an element whose gradient is near eps. Adam's update g / (|g| + eps) moves by
    lr eps / (|g| + eps)^2 per unit of gradient there (10^4 lr at |g| = eps = 1e-8), so the rounding of a correct
    route moves such an element's update far more than its value's ulps: each element is allowed
    lr SPREAD error eps / (|g| + eps)^2 (its exact |g| standing for Adam's running RMS), at most Adam's largest move,
    from that step on. Measured, not assumed: a tiny Qwen2 has gate_proj elements at |g| = 2 eps whose update moved by
    1.1e-6 for a gradient 1e-10 off, while the fp32 reference happened to round that element right."""
    import torch

    out: list[dict[str, float]] = []
    carried: dict[str, float] = {}
    for step, (grads, truths) in enumerate(zip(noisy, exact, strict=True)):
        for name, value in grads.items():
            lr = rate(step, name)
            truth = truths[name].double()
            error = float(torch.linalg.vector_norm(value.double() - truth)) / math.sqrt(truth.numel())
            noisy_elements = int((truth.abs() <= error / NOISE).sum())
            if noisy_elements:
                carried[name] = carried.get(name, 0.0) + 2 * lr * adam_bound(betas) * math.sqrt(
                    noisy_elements
                )
            if eps is not None and error > 0:
                moved = (lr * SPREAD * error * eps / (truth.abs() + eps) ** 2).clamp(
                    max=2 * lr * adam_bound(betas)
                )
                carried[name] = carried.get(name, 0.0) + float(torch.linalg.vector_norm(moved))
        out.append(dict(carried))
    return out

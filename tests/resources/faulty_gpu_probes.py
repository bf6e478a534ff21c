"""A compute family with a planted faulty GPU (DS_DOCTOR_EXTRA_PROBES): the real known-answer matmul runs on two
ranks, then, with DS_DOCTOR_TEST_BAD_GPU=1 in the environment, one low mantissa bit of one element of rank 1's
product is flipped, as a GPU corrupting data silently would. One GPU of several: the check must name rank 1 only,
by the wrong element and by its bits differing from rank 0's. Only the tests register this module."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ds_doctor.plugins import ProbeContext, Variant
from ds_doctor.probes import compute

SPEC = dataclasses.replace(compute.SPEC, name="faulty_gpu", world_sizes=(2,), scale_to_node=False)


def variants() -> list[Variant]:
    return [Variant("matmul-bf16", compute.ComputeCase("bf16"), level=2)]


def flip_one_bit(dtype: str, rank: int, product: Any) -> None:
    import torch

    if rank == 1:
        flat = product.view(-1).view(torch.int16)
        flat[7] ^= 1  # the lowest mantissa bit of element 7


def run(ctx: ProbeContext) -> None:
    compute.AFTER_MATMUL = flip_one_bit if os.environ.get("DS_DOCTOR_TEST_BAD_GPU") == "1" else None
    try:
        compute.run(ctx)
    finally:
        compute.AFTER_MATMUL = None

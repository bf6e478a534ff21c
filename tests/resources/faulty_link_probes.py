"""A comm family with a planted bad link (DS_DOCTOR_EXTRA_PROBES): the real collectives run, then,
with DS_DOCTOR_TEST_BAD_LINK=1 in the environment, one element of rank 1's result is changed, as a
flipped bit on the wire would, so the tests can show that the checks catch it. Only the tests
register this module."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ds_doctor.plugins import ProbeContext, Variant
from ds_doctor.probes import comm

SPEC = dataclasses.replace(comm.SPEC, name="faulty_link", world_sizes=(2,), scale_to_node=False)


def variants() -> list[Variant]:
    return [Variant(name, comm.CommCase(name), level=2) for name in ("all_reduce", "all_gather")] + [
        Variant("all_reduce-bf16", comm.CommCase("all_reduce", "bfloat16"), level=2)
    ]


def flip_one_element(collective: str, rank: int, result: Any) -> None:
    if rank == 1 and result.numel() > 3:
        result[3] += 1.0


def run(ctx: ProbeContext) -> None:
    comm.run(ctx, after_run=flip_one_element if os.environ.get("DS_DOCTOR_TEST_BAD_LINK") == "1" else None)

"""Silent data corruption, measured by injection: the compute probe's known-answer matmul (every output element an
exact odd integer, probes/shared/known_answer.py) against single bits flipped anywhere in an element (every mantissa
and exponent bit, the sign), whole elements, and one rank of several, on CPU. The rate and the time go to
docs/nightly.md; a healthy product never raises."""

from __future__ import annotations

import random
import time

import pytest
import torch

from ds_doctor.plugins import ProbeContext
from ds_doctor.probes import compute
from ds_doctor.probes.shared.known_answer import (
    EXACT,
    bits_differ,
    exact_inputs,
    expected_product,
    flip,
    wrong_elements,
)

WIDTH = {"bf16": 16, "fp16": 16, "fp32": 32}


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_every_injected_corruption_is_caught_and_a_healthy_product_never_is(dtype: str) -> None:
    a, b = exact_inputs(256, dtype, torch.device("cpu"), 4242)
    product, expected = a @ b, expected_product(a, b)
    assert wrong_elements(product, expected, dtype) == (0, [])
    for _ in range(20):  # no false alarm: the same matmul again, and again
        assert bits_differ(product, a @ b, dtype) == 0
    draws = random.Random(7)
    injections = [
        (draws.randrange(product.numel()), bit) for bit in [*range(WIDTH[dtype]), None] for _ in range(40)
    ]
    started = time.perf_counter()
    caught = 0
    for element, bit in injections:
        corrupted = product.clone()
        flip(corrupted, dtype, element, bit)
        count, named = wrong_elements(corrupted, expected, dtype)
        caught += count == 1 and (named[0].row, named[0].column) == divmod(element, 256)
    seconds = time.perf_counter() - started
    print(
        f"{dtype}: {caught} of {len(injections)} injections caught, {seconds / len(injections) * 1e3:.2f} ms each"
    )
    assert caught == len(
        injections
    )  # by construction: every element an odd integer, every bit flip changes it


def test_the_inputs_stay_exact_in_each_dtype() -> None:
    """At the GPU's size too: each row's non-zeros are odd in count and at most what the dtype holds exactly."""
    for dtype, limit in EXACT.items():
        a, _ = exact_inputs(1024, dtype, torch.device("cpu"), 1)
        per_row = (a != 0).sum(dim=1)
        assert bool((per_row % 2 == 1).all()) and int(per_row.max()) <= min(limit, 1024)


def test_the_probe_names_the_element_and_its_bits_and_a_replay_that_differs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fault in one product (as a GPU that corrupts one element): the known answer names the element and the bits
    that differ, and the replay of the same matmul gives other bits."""

    def corrupt(dtype: str, rank: int, product: torch.Tensor) -> None:
        flip(product, dtype, 5 * 256 + 9, 3)  # element [5, 9], the fourth-lowest mantissa bit

    monkeypatch.setattr(compute, "AFTER_MATMUL", corrupt)
    ctx = ProbeContext(
        case_id="compute[matmul-bf16-ws1]",
        params=None,
        rank=0,
        world_size=1,
        local_rank=0,
        device="cpu",
        backend="gloo",
    )
    findings = compute.known_answer(ctx, "bf16", 256, torch.device("cpu"))
    assert [f.invariant for f in findings] == ["matmul_known_answer", "matmul_replay"]
    assert "1 of 65536 elements wrong, bit for bit: [5, 9] = " in findings[0].message
    assert "(bits differing: 0000000000001000)" in findings[0].message
    assert ctx.notes["known_answer"] == {
        "elements": 65536,
        "wrong_elements": 1,
        "replay_differing": 1,
        "ranks_differing": [],
    }
    monkeypatch.setattr(compute, "AFTER_MATMUL", None)
    assert compute.known_answer(ctx, "bf16", 256, torch.device("cpu")) == []

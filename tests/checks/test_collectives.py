"""Collective arithmetic against nccl-tests' formulas, and the exact-value checks on real tensors."""

from __future__ import annotations

import math

import pytest
import torch

from ds_doctor.checks import collectives

# nccl-tests src/{all_reduce,all_gather,reduce_scatter,broadcast,alltoall}.cu, *GetBw: busbw = algbw * factor
NCCL_TESTS_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "alltoall": lambda n: (n - 1) / n,
}


@pytest.mark.parametrize("collective", collectives.COLLECTIVES)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 16, 64])
def test_bus_factor_is_nccl_tests_factor(collective: str, n: int) -> None:
    assert collectives.bus_factor(collective, n) == pytest.approx(NCCL_TESTS_FACTORS[collective](n))


def test_bandwidths_on_a_worked_example() -> None:
    # 8 GPUs, all_reduce of 1 GiB in 5 ms: algbw = 2^30 / 1e9 / 0.005 = 214.748... GB/s,
    # busbw = algbw * 2 * 7 / 8 = 375.809... GB/s (the number an nccl-tests user compares)
    algbw, busbw = collectives.bandwidths("all_reduce", 1 << 30, 0.005, 8)
    assert algbw == pytest.approx(214.7483648)
    assert busbw == pytest.approx(214.7483648 * 1.75)
    # all_gather counts the whole gathered output, as nccl-tests' count * typesize * nranks
    algbw, busbw = collectives.bandwidths("all_gather", 8 * 4 * 1024, 1e-6, 8)
    assert algbw == pytest.approx(32.768) and busbw == pytest.approx(32.768 * 7 / 8)
    assert collectives.bandwidths("broadcast", 10**9, 1.0, 4) == (1.0, 1.0)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown collective"):
        collectives.bus_factor("all_to_all", 2)
    with pytest.raises(ValueError, match="world size"):
        collectives.bus_factor("all_reduce", 0)
    with pytest.raises(ValueError, match="positive"):
        collectives.bandwidths("all_reduce", 100, 0.0, 2)


@pytest.mark.parametrize("dtype", collectives.DTYPES)
@pytest.mark.parametrize("collective", collectives.COLLECTIVES)
@pytest.mark.parametrize("n", [1, 2, 8])
def test_expected_values_follow_from_the_inputs_of_every_rank(collective: str, n: int, dtype: str) -> None:
    """Simulate the collective from every rank's inputs, by hand, and compare with `expected`."""
    numel = 40 * n
    inputs = [collectives.inputs(collective, numel, r, n, device="cpu", dtype=dtype)[0] for r in range(n)]
    assert all(str(tensor.dtype) == f"torch.{dtype}" for tensor in inputs)
    for rank in range(n):
        want = collectives.expected(collective, numel, rank, n, device="cpu", dtype=dtype)
        assert want.dtype == inputs[0].dtype
        if collective == "all_reduce":
            truth = sum(inputs)
        elif collective == "all_gather":
            truth = torch.cat(inputs)
        elif collective == "reduce_scatter":
            truth = sum(inputs).chunk(n)[rank]
        elif collective == "alltoall":  # chunk `rank` of every rank, in rank order
            truth = torch.cat([source.chunk(n)[rank] for source in inputs])
        else:
            truth = inputs[0]
        assert collectives.compare(truth, want).ok
        assert torch.equal(truth, want)


def test_the_data_are_exact_in_fp32_at_many_ranks() -> None:
    n = 1024
    want = collectives.expected("all_reduce", 64, 0, n, device="cpu")
    assert float(want.max()) == n * (n + 1) / 2 * collectives.PATTERN < 2**24
    assert all(math.isclose(float(v), float(v).__round__()) for v in want)
    # alltoall: every (source, destination) chunk distinct, and exact, at the most ranks it is built for
    last = collectives.expected("alltoall", 16 * n, n - 1, n, device="cpu")
    assert float(last.max()) < 2**24 and len({tuple(chunk.tolist()) for chunk in last.chunk(n)}) == n


def test_compare_pins_the_first_wrong_element() -> None:
    want = collectives.expected("all_reduce", 16, 0, 2, device="cpu")
    got = want.clone()
    got[5] += 1
    got[9] = float("nan")
    check = collectives.compare(got, want)
    assert not check.ok
    assert (check.wrong, check.numel, check.first_index) == (2, 16, 5)
    assert check.got == float(want[5]) + 1 and check.expected == float(want[5])
    assert "2 of 16 elements wrong (first at index 5" in check.describe()
    with pytest.raises(ValueError, match="shape"):
        collectives.compare(got[:8], want)


@pytest.mark.parametrize("n", [2, 8, 256])
def test_bf16_sums_are_exact_in_any_order(n: int) -> None:
    """Every partial sum of the ranks' bf16 data is an integer of at most 256: exact in bf16, whatever order NCCL or
    gloo adds in (summed here one rank at a time, in bf16)."""
    inputs = [collectives.inputs("all_reduce", 64, r, n, device="cpu", dtype="bfloat16")[0] for r in range(n)]
    running = torch.zeros(64, dtype=torch.bfloat16)
    for tensor in reversed(inputs):
        running = running + tensor
        assert float(running.float().max()) <= collectives.BF16_EXACT
    assert torch.equal(running, collectives.expected("all_reduce", 64, 0, n, device="cpu", dtype="bfloat16"))


def test_bf16_moved_data_are_finite_and_say_who_sent_them() -> None:
    n = 64
    last = collectives.expected("alltoall", 16 * n, n - 1, n, device="cpu", dtype="bfloat16")
    assert bool(torch.isfinite(last).all()) and bool((last > 0).all())
    assert len({tuple(chunk.view(torch.int16).tolist()) for chunk in last.chunk(n)}) == n
    gathered = collectives.expected("all_gather", 8 * n, 0, n, device="cpu", dtype="bfloat16")
    assert len({tuple(chunk.view(torch.int16).tolist()) for chunk in gathered.chunk(n)}) == n


@pytest.mark.parametrize("collective", collectives.COLLECTIVES)
def test_every_single_bit_flip_of_a_bf16_result_is_caught(collective: str) -> None:
    """Each of an element's 16 bits, flipped, in every collective's bf16 result: compared bit for bit, so a flip to
    a NaN, to the same value's other zero, or in the lowest mantissa bit is caught as any other."""
    want = collectives.expected(collective, 32, 1, 2, device="cpu", dtype="bfloat16")
    for bit in range(16):
        bits = want.view(torch.int16).clone()
        bits[5] ^= torch.tensor(1 << bit, dtype=torch.int32).to(torch.int16)
        check = collectives.compare(bits.view(torch.bfloat16), want)
        assert (check.wrong, check.first_index) == (1, 5), bit


def test_an_unknown_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        collectives.inputs("all_reduce", 8, 0, 1, device="cpu", dtype="float16")

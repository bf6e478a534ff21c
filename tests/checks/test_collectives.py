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


@pytest.mark.parametrize("collective", collectives.COLLECTIVES)
@pytest.mark.parametrize("n", [1, 2, 8])
def test_expected_values_follow_from_the_inputs_of_every_rank(collective: str, n: int) -> None:
    """Simulate the collective from every rank's inputs, by hand, and compare with `expected`."""
    numel = 40 * n
    inputs = [collectives.inputs(collective, numel, r, n, device="cpu")[0] for r in range(n)]
    for rank in range(n):
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
        want = collectives.expected(collective, numel, rank, n, device="cpu")
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

"""Collectives as nccl-tests measures them, and the exact values each one must produce.

Bandwidth follows nccl-tests (src/*.cu `*GetBw`, explained in its doc/PERFORMANCE.md):
`algbw = S / t` with S the size of the collective's largest buffer (the whole gathered output for
all_gather, the whole input for reduce_scatter) and t the time of one operation averaged over the
ranks; `busbw = algbw * factor`, the factor that makes every collective comparable with the
hardware's peak link bandwidth:

    all_reduce      2 (n - 1) / n
    all_gather      (n - 1) / n
    reduce_scatter  (n - 1) / n
    broadcast       1
    alltoall        (n - 1) / n   (what MoE and expert-parallel jobs depend on; torch's all_to_all_single)

GB/s are 1e9 bytes per second, as there. The data are small integers in fp32, so every sum is
exact and a result is compared element for element, with no tolerance. In bf16 (8 bits of mantissa: every integer up
to 256 is exact), what is summed cycles through small integers that keep the sum over every rank at most 256, and
what is only moved (gathered, broadcast, exchanged) is a distinct finite bit pattern per sender, compared bit for
bit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall")
PATTERN = 13  # values cycle through 1..PATTERN: sums over up to 1024 ranks stay below 2**24, exact in fp32
DTYPES = ("float32", "bfloat16")
BF16_EXACT = 256  # every integer up to 2**8 is a bfloat16
#: bf16 bit patterns of moved data: [0x3C00, 0x6C00), finite and positive (the exponent never all ones)
_BITS_BASE, _BITS_SPAN = 0x3C00, 0x3000
_BITS_KEYS = _BITS_SPAN // PATTERN  # 945 senders told apart


def _alltoall_key(source: int, destination: int) -> int:
    """Distinct for every source at one destination (up to 945 ranks), and for one source's chunks to two
    destinations: a chunk delivered to the wrong rank shows."""
    return 31 * source + destination


def element_size(dtype: str) -> int:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (one of {', '.join(DTYPES)})")
    return 4 if dtype == "float32" else 2


def bus_factor(collective: str, world_size: int) -> float:
    """nccl-tests' busbw factor for `collective` at `world_size` ranks."""
    n = world_size
    if n < 1:
        raise ValueError(f"world size must be >= 1, got {n}")
    factors = {
        "all_reduce": 2 * (n - 1) / n,
        "all_gather": (n - 1) / n,
        "reduce_scatter": (n - 1) / n,
        "broadcast": 1.0,
        "alltoall": (n - 1) / n,
    }
    if collective not in factors:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    return factors[collective]


def bandwidths(collective: str, nbytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for one operation on `nbytes` (the largest buffer) taking `seconds`."""
    if seconds <= 0:
        raise ValueError(f"time must be positive, got {seconds}")
    algbw = nbytes / 1e9 / seconds
    return algbw, algbw * bus_factor(collective, world_size)


@dataclasses.dataclass(frozen=True)
class Check:
    """How one collective's result compared with the exact expected values on one rank."""

    wrong: int
    numel: int
    first_index: int | None = None
    got: float | None = None
    expected: float | None = None

    @property
    def ok(self) -> bool:
        return self.wrong == 0

    def describe(self) -> str:
        if self.ok:
            return f"all {self.numel} elements exact"
        return (
            f"{self.wrong} of {self.numel} elements wrong (first at index {self.first_index}: "
            f"got {self.got:g}, expected {self.expected:g})"
        )


def pattern(numel: int, *, device: Any, scale: float = 1.0, offset: float = 0.0) -> Any:
    """`offset + scale * (1 + i % PATTERN)` for i in 0..numel-1, in fp32."""
    import torch

    base = torch.arange(numel, device=device, dtype=torch.int64).remainder_(PATTERN).add_(1).to(torch.float32)
    return base.mul_(scale).add_(offset)


def small_integers(numel: int, world_size: int, *, device: Any) -> Any:
    """bf16 data to be summed over `world_size` ranks: `1 + i % L` with L * world_size <= 256, so every partial
    sum, in any order, is an exact bf16 integer (L is 1 past 256 ranks: the sum is then the world size, exact where
    that is a bf16 integer)."""
    import torch

    levels = max(1, BF16_EXACT // world_size)
    return torch.arange(numel, device=device, dtype=torch.int64).remainder_(levels).add_(1).to(torch.bfloat16)


def bit_patterns(numel: int, key: int, *, device: Any) -> Any:
    """bf16 data that is only moved: finite values whose bits say who sent them (`key`) and where they sit."""
    import torch

    base = torch.arange(numel, device=device, dtype=torch.int64).remainder_(PATTERN)
    bits = base.add_((key % _BITS_KEYS) * PATTERN).add_(_BITS_BASE)
    return bits.to(torch.int16).view(torch.bfloat16)


def inputs(
    collective: str, numel: int, rank: int, world_size: int, *, device: Any, dtype: str = "float32"
) -> tuple[Any, Any]:
    """(input, output) tensors for one check of `collective`; `numel` is the largest buffer's length."""
    import torch

    per_rank = numel // world_size
    if dtype == "bfloat16":
        return _bf16_inputs(collective, numel, rank, world_size, device)
    element_size(dtype)
    if collective == "all_reduce":
        return pattern(numel, device=device, scale=rank + 1), None
    if collective == "all_gather":
        return pattern(per_rank, device=device, offset=100.0 * rank), torch.empty(
            per_rank * world_size, device=device
        )
    if collective == "reduce_scatter":
        return pattern(per_rank * world_size, device=device, scale=rank + 1), torch.empty(
            per_rank, device=device
        )
    if collective == "broadcast":
        source = pattern(numel, device=device, offset=7.0)
        return (source if rank == 0 else torch.zeros(numel, device=device)), None
    if (
        collective == "alltoall"
    ):  # chunk j goes to rank j: each chunk says where it came from and where it goes
        chunks = [_alltoall_chunk(per_rank, rank, to, device) for to in range(world_size)]
        return torch.cat(chunks), torch.empty(per_rank * world_size, device=device)
    raise ValueError(f"unknown collective {collective!r}")


def _bf16_inputs(collective: str, numel: int, rank: int, world_size: int, device: Any) -> tuple[Any, Any]:
    import torch

    per_rank = numel // world_size
    if collective in ("all_reduce", "reduce_scatter"):
        source = small_integers(
            per_rank * world_size if collective == "reduce_scatter" else numel, world_size, device=device
        )
        out = (
            torch.empty(per_rank, device=device, dtype=torch.bfloat16)
            if collective == "reduce_scatter"
            else None
        )
        return source, out
    if collective == "all_gather":
        out = torch.empty(per_rank * world_size, device=device, dtype=torch.bfloat16)
        return bit_patterns(per_rank, rank, device=device), out
    if collective == "broadcast":
        source = bit_patterns(numel, 7, device=device)
        return (source if rank == 0 else torch.zeros(numel, device=device, dtype=torch.bfloat16)), None
    if collective == "alltoall":
        chunks = [bit_patterns(per_rank, _alltoall_key(rank, to), device=device) for to in range(world_size)]
        return torch.cat(chunks), torch.empty(per_rank * world_size, device=device, dtype=torch.bfloat16)
    raise ValueError(f"unknown collective {collective!r}")


def _bf16_expected(collective: str, numel: int, rank: int, world_size: int, device: Any) -> Any:
    import torch

    per_rank = numel // world_size
    if collective in ("all_reduce", "reduce_scatter"):
        count = per_rank * world_size if collective == "reduce_scatter" else numel
        total = small_integers(count, world_size, device=device).float().mul_(world_size).to(torch.bfloat16)
        return total[rank * per_rank : (rank + 1) * per_rank] if collective == "reduce_scatter" else total
    if collective == "all_gather":
        return torch.cat([bit_patterns(per_rank, r, device=device) for r in range(world_size)])
    if collective == "broadcast":
        return bit_patterns(numel, 7, device=device)
    if collective == "alltoall":
        return torch.cat(
            [
                bit_patterns(per_rank, _alltoall_key(source, rank), device=device)
                for source in range(world_size)
            ]
        )
    raise ValueError(f"unknown collective {collective!r}")


def _alltoall_chunk(per_rank: int, source: int, destination: int, device: Any) -> Any:
    """The chunk rank `source` sends to rank `destination`: distinct for every pair (exact in fp32 up to 1024
    ranks: 1024 * 1024 * 16 < 2**24)."""
    return pattern(per_rank, device=device, offset=16.0 * (1024 * source + destination))


def expected(
    collective: str, numel: int, rank: int, world_size: int, *, device: Any, dtype: str = "float32"
) -> Any:
    """The exact values `collective` must leave on `rank` (in its output, or in place)."""
    import torch

    if dtype == "bfloat16":
        return _bf16_expected(collective, numel, rank, world_size, device)
    element_size(dtype)
    per_rank = numel // world_size
    rank_sum = world_size * (world_size + 1) / 2  # sum of (r + 1) over the ranks
    if collective == "all_reduce":
        return pattern(numel, device=device, scale=rank_sum)
    if collective == "all_gather":
        return torch.cat([pattern(per_rank, device=device, offset=100.0 * r) for r in range(world_size)])
    if collective == "reduce_scatter":
        return pattern(per_rank * world_size, device=device, scale=rank_sum)[
            rank * per_rank : (rank + 1) * per_rank
        ]
    if collective == "broadcast":
        return pattern(numel, device=device, offset=7.0)
    if collective == "alltoall":
        return torch.cat([_alltoall_chunk(per_rank, source, rank, device) for source in range(world_size)])
    raise ValueError(f"unknown collective {collective!r}")


def compare(result: Any, want: Any) -> Check:
    """Element-for-element comparison of a collective's result with the exact expected values."""
    import torch

    if tuple(result.shape) != tuple(want.shape):
        raise ValueError(f"result shape {tuple(result.shape)} != expected {tuple(want.shape)}")
    if (
        result.dtype == torch.bfloat16
    ):  # bit for bit: a NaN that is not the NaN expected is wrong, as any other
        bad = torch.nonzero(result.view(torch.int16) != want.view(torch.int16)).flatten()
    else:
        bad = torch.nonzero(result != want).flatten()
    if bad.numel() == 0:
        return Check(0, result.numel())
    first = int(bad[0])
    return Check(int(bad.numel()), result.numel(), first, float(result[first]), float(want[first]))


def run_once(collective: str, tensors: tuple[Any, Any], group: Any = None) -> Any:
    """Run `collective` once on (input, output), over `group` (default: every rank); the tensor holding the result."""
    import torch.distributed as dist

    source, out = tensors
    if collective == "all_reduce":
        dist.all_reduce(source, group=group)
        return source
    if collective == "all_gather":
        dist.all_gather_into_tensor(out, source, group=group)
        return out
    if collective == "reduce_scatter":
        dist.reduce_scatter_tensor(out, source, group=group)
        return out
    if collective == "broadcast":
        dist.broadcast(source, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
        return source
    if collective == "alltoall":
        dist.all_to_all_single(out, source, group=group)
        return out
    raise ValueError(f"unknown collective {collective!r}")

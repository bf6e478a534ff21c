"""Matmuls whose every output element is known exactly, for finding silent data corruption bit for bit.

A comparison within a tolerance misses what a faulty GPU does most: one element wrong, or a low mantissa bit
flipped (a fault-injection study found NaN/Inf in ~1 % of silent corruptions). Here the inputs are small integers
built so that every partial sum and every output is an integer the dtype holds exactly: each row of `a` is +-1 on an
odd number of columns, at most `EXACT[dtype]` (256 for bf16, whose 8 significant bits hold every integer up to 256;
2048 for fp16; any for fp32 up to 2**24), and 0 elsewhere; `b` is +-1. Whatever order the kernel adds in, the
product is exact, and every element an odd integer (never 0, so no sign of zero to argue about): the expected
product (fp64 on the same device, exact on integers) must equal it, and a flip of any bit of any element changes
its value. A mismatch names the element and the bits that differ.
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: The most non-zeros per row of `a` for which every integer the product can hold is exact in the output dtype
EXACT = {"bf16": 256, "fp16": 2048, "fp32": 1 << 24}
#: The integer type a dtype's bits are read as
BITS = {"bf16": "int16", "fp16": "int16", "fp32": "int32"}
NAMED = 5  # wrong elements named in a finding, at most


def torch_dtype(name: str) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def exact_inputs(n: int, dtype_name: str, device: Any, seed: int) -> tuple[Any, Any]:
    """(a, b), n x n in the dtype, drawn on `device` from `seed` (the same values on identical devices): `a`'s row i
    is +-1 on the odd number of columns from a random shift on (wrapping), 0 elsewhere."""
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    width = min(n, EXACT[dtype_name])
    width -= (
        1 - width % 2
    )  # odd: every output is a sum of an odd count of +-1, an odd integer, never 0 (nor -0)
    shifts = torch.randint(0, n, (n, 1), generator=generator, device=device)
    columns = torch.arange(n, device=device).unsqueeze(0)
    inside = (columns - shifts).remainder(n) < width
    signs = torch.randint(0, 2, (n, n), generator=generator, device=device, dtype=torch.int8) * 2 - 1
    a = (signs * inside).to(torch_dtype(dtype_name))
    b = (torch.randint(0, 2, (n, n), generator=generator, device=device, dtype=torch.int8) * 2 - 1).to(
        torch_dtype(dtype_name)
    )
    return a, b


def expected_product(a: Any, b: Any) -> Any:
    """The exact product, fp64 (integers well inside 2**53)."""
    import torch

    return a.to(torch.float64) @ b.to(torch.float64)


@dataclasses.dataclass(frozen=True)
class WrongElement:
    row: int
    column: int
    got: float
    want: float
    differing_bits: int  # the XOR of the two values' bits, as the dtype's integer type

    def describe(self, dtype_name: str) -> str:
        width = 16 if BITS[dtype_name] == "int16" else 32
        return (
            f"[{self.row}, {self.column}] = {self.got:g}, not {self.want:g} "
            f"(bits differing: {self.differing_bits & ((1 << width) - 1):0{width}b})"
        )


def wrong_elements(product: Any, expected: Any, dtype_name: str) -> tuple[int, list[WrongElement]]:
    """How many elements of `product` differ from the exact `expected`, and the first NAMED of them (row-major)."""
    import torch

    wrong = product.to(torch.float64) != expected
    count = int(wrong.sum())
    if not count:
        return 0, []
    kind = getattr(torch, BITS[dtype_name])
    want = expected.to(product.dtype)
    got_bits, want_bits = product.view(kind), want.view(kind)
    named = []
    for row, column in wrong.nonzero()[:NAMED].tolist():
        named.append(
            WrongElement(
                row,
                column,
                float(product[row, column]),
                float(expected[row, column]),
                int(got_bits[row, column] ^ want_bits[row, column]),
            )
        )
    return count, named


def bits_differ(first: Any, second: Any, dtype_name: str) -> int:
    """How many elements of two products of the same inputs differ in any bit (a replay must give the same bits)."""
    import torch

    kind = getattr(torch, BITS[dtype_name])
    return int((first.view(kind) != second.view(kind)).sum())


def checksum(product: Any, dtype_name: str) -> list[int]:
    """Two exact integer sums of the product's bits (plain, and weighted by position): what ranks compare to say
    that identical GPUs gave identical bits, without moving the product."""
    import torch

    bits = product.view(getattr(torch, BITS[dtype_name])).reshape(-1).to(torch.int64)
    weights = torch.arange(bits.numel(), device=bits.device, dtype=torch.int64).remainder_(65521).add_(1)
    return [int(bits.sum()), int((bits * weights).sum())]


def flip(product: Any, dtype_name: str, element: int, bit: int | None) -> None:
    """For the tests: corrupt `product` in place at flat `element`, one `bit` (0 = the lowest mantissa bit; the sign
    is the highest) or, with None, the whole element (its bits inverted)."""
    import torch

    bits = product.view(getattr(torch, BITS[dtype_name])).reshape(-1)
    width = 16 if BITS[dtype_name] == "int16" else 32
    mask = -1 if bit is None else (1 << bit if bit < width - 1 else -(1 << (width - 1)))
    bits[element] ^= torch.tensor(mask, dtype=bits.dtype)

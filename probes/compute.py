"""Hardware smoke, compute: on every rank's device, matmuls in bf16, fp16 and fp32 checked against
an fp64 reference within tolerances set by each dtype's precision, the TFLOP/s they reach, and an
allocation of a large share of free GPU memory written and read back. On CPU the same checks run
at a small size (correctness, not speed).

The reference is the fp64 product of the same (already rounded) inputs for a slice of rows, so the
error measured is the matmul's own: accumulation and output rounding. The tolerance on the
relative Frobenius error is a few output roundings of the dtype (bf16 2**-8, fp16 2**-11); fp32
runs with TF32 off (torch's default for matmul), and its tolerance allows for accumulation order.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from ds_doctor.plugins import Finding, ProbeContext, ProbeSpec, Severity, Variant
from ds_doctor.plugins.requirements import TORCH
from ds_doctor.probes.shared.common import synchronize
from ds_doctor.probes.shared.known_answer import (
    bits_differ,
    checksum,
    exact_inputs,
    expected_product,
    wrong_elements,
)

SPEC = ProbeSpec(
    name="compute",
    scenario="smoke",
    description="bf16/fp16/fp32 matmul checked against fp64, TFLOP/s, and a large allocation written and read back",
    world_sizes=(1,),
    requires=(TORCH,),
    timeout_s=300.0,
    scale_to_node=True,
    across_nodes=("*",),  # also across every node of a multi-node run
    alone=True,  # timed (and the memory case fills memory): never beside another launch's work
)

DTYPES = ("bf16", "fp16", "fp32")
TOLERANCE = {"bf16": 1.6e-2, "fp16": 5e-3, "fp32": 1e-4}  # relative Frobenius error vs fp64
SIZE = {"cpu": 256, "cuda": 8192}  # square matmul size
ITERS = {"cpu": (1, 3), "cuda": (3, 20)}  # (warm-up, timed)
REFERENCE_ROWS = 256
#: GPU: allocate this share of the free memory; CPU: a fixed small block.
MEMORY_SHARE = 0.85
CPU_MEMORY_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class ComputeCase:
    dtype: str | None  # a matmul in this dtype (one of DTYPES), or None: the memory check


def variants() -> list[Variant]:
    out = [Variant(name=f"matmul-{dtype}", params=ComputeCase(dtype), level=2) for dtype in DTYPES]
    return [*out, Variant(name="memory", params=ComputeCase(None), level=2)]


def run(ctx: ProbeContext) -> None:
    dtype = ctx.params.dtype
    if dtype is None:
        _memory(ctx)
    else:
        _matmul(ctx, dtype)


def relative_error(result: Any, reference: Any) -> float:
    """||result - reference|| / ||reference|| in fp64 (Frobenius)."""
    import torch

    result64 = result.to(torch.float64)
    return float(torch.linalg.norm(result64 - reference) / torch.linalg.norm(reference))


def _matmul(ctx: ProbeContext, dtype_name: str) -> None:
    """One dtype: is the product right (against fp64), then how fast it is; a wrong product is an error."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype_name]
    device = torch.device(ctx.device)
    n = SIZE[ctx.device_kind]
    ctx.enter(f"matmul {dtype_name} {n}x{n}: inputs")
    a, b = _matmul_inputs(n, dtype, device, seed=1234 + ctx.rank)
    torch.backends.cuda.matmul.allow_tf32 = False
    ctx.enter(f"matmul {dtype_name} {n}x{n}: check")
    error, finite = _matmul_accuracy(a, b)
    ctx.enter(f"matmul {dtype_name} {n}x{n}: timing")
    seconds = _seconds_per_matmul(a, b, device, *ITERS[ctx.device_kind])
    _record_matmul(ctx, dtype_name, n, error, tflops=2 * n**3 / seconds / 1e12)
    del a, b
    findings = (
        []
        if finite and error <= TOLERANCE[dtype_name]
        else [_matmul_finding(ctx, dtype_name, n, error, finite)]
    )
    ctx.enter(f"matmul {dtype_name} {n}x{n}: known answer, replay, ranks")
    ctx.add_findings(findings + known_answer(ctx, dtype_name, n, device))


#: A test hook: called with (dtype, rank, product) on the known-answer product before it is checked; the tests flip
#: bits there, as a faulty GPU would. None in real runs.
AFTER_MATMUL: Callable[[str, int, Any], None] | None = None
KNOWN_ANSWER_SEED = 4242  # the same inputs on every rank: identical GPUs must give identical bits


def known_answer(ctx: ProbeContext, dtype_name: str, n: int, device: Any) -> list[Finding]:
    """The product of exact inputs (probes.shared.known_answer) checked over every element, bit for bit; the same
    matmul replayed and compared bitwise; the ranks' bits compared across the node's GPUs."""
    a, b = exact_inputs(n, dtype_name, device, KNOWN_ANSWER_SEED)
    product = a @ b
    if AFTER_MATMUL is not None:
        AFTER_MATMUL(dtype_name, ctx.rank, product)
    wrong, named = wrong_elements(product, expected_product(a, b), dtype_name)
    replayed = bits_differ(product, a @ b, dtype_name)
    sums = ctx.all_gather_json(checksum(product, dtype_name))
    majority = max(sums, key=sums.count)
    agreed = 2 * sums.count(majority) > len(sums)  # a strict majority
    kinds = [mine for rank, mine in enumerate(sums) if mine not in sums[:rank]]  # checksums are JSON lists
    # with no strict majority (two ranks that disagree) the bits alone cannot say which rank is odd: all are named
    odd_ranks = (
        [] if len(kinds) == 1 else [r for r, mine in enumerate(sums) if not agreed or mine != majority]
    )
    ctx.note(
        "known_answer",
        {
            "elements": n * n,
            "wrong_elements": wrong,
            "replay_differing": replayed,
            "ranks_differing": odd_ranks,
        },
    )
    remedy = (
        "a GPU whose exact product comes out wrong is corrupting data silently: rerun this check on it alone, read its "
        "health section (Xid, ECC, remapped rows), and drain the node if it repeats"
    )
    case = f"{dtype_name} {n}x{n} matmul"
    wrongs = [
        (
            wrong > 0,
            "matmul_known_answer",
            f"{case} of exact integers on {ctx.device}: {wrong} of {n * n} elements wrong, bit for bit: "
            + "; ".join(w.describe(dtype_name) for w in named),
            "every element the exact integer product (the inputs are chosen so the dtype holds it)",
        ),
        (
            replayed > 0,
            "matmul_replay",
            f"{case} on {ctx.device}: the same inputs twice gave {replayed} elements with other bits",
            "the same bits from the same inputs on the same GPU",
        ),
        (
            bool(odd_ranks) and ctx.rank == min(odd_ranks),  # said once, by the first odd rank
            "matmul_ranks_differ",
            (
                f"{case} of the same inputs: rank(s) {', '.join(map(str, odd_ranks))} gave other bits than the other "
                f"{len(sums) - len(odd_ranks)} rank(s) of this node"
                if agreed
                else f"{case} of the same inputs: the {len(sums)} ranks of this node gave {len(kinds)} different "
                "results and no majority agrees: the known answer says which is wrong"
            ),
            "identical bits from identical GPUs",
        ),
    ]
    return [
        Finding(
            invariant=invariant,
            severity=Severity.ERROR,
            message=message,
            stage=ctx.stage,
            expected=expected,
            remedy=remedy,
        )
        for shown, invariant, message, expected in wrongs
        if shown
    ]


def _matmul_inputs(n: int, dtype: Any, device: Any, *, seed: int) -> tuple[Any, Any]:
    """Two n x n normal matrices, drawn on the CPU (the same values on any device) and rounded to `dtype`."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=generator).to(device=device, dtype=dtype)
    return a, b


def _matmul_accuracy(a: Any, b: Any) -> tuple[float, bool]:
    """The product's relative error on its first REFERENCE_ROWS rows against fp64 (cheap, and the same kernel),
    and whether the whole product is finite."""
    import torch

    product = a @ b
    reference = a[:REFERENCE_ROWS].to(torch.float64) @ b.to(torch.float64)
    return relative_error(product[:REFERENCE_ROWS], reference), bool(torch.isfinite(product).all())


def _seconds_per_matmul(a: Any, b: Any, device: Any, warmup: int, iters: int) -> float:
    """Mean time of one `a @ b` after `warmup` untimed ones (kernel choice, clocks), synchronized around the loop."""
    for _ in range(warmup):
        a @ b
    synchronize(device)
    started = time.perf_counter()
    for _ in range(iters):
        a @ b
    synchronize(device)
    return (time.perf_counter() - started) / iters


def _record_matmul(ctx: ProbeContext, dtype_name: str, n: int, error: float, *, tflops: float) -> None:
    """The case's measures; TFLOP/s is the slowest rank's, since the slowest GPU decides what a job on this
    node gets."""
    import torch

    ctx.note("dtype", dtype_name)
    ctx.measure("matmul_size", n)
    ctx.measure("relative_error", error)
    ctx.measure("error_tolerance", TOLERANCE[dtype_name])
    by_rank = _all_ranks(ctx, round(tflops, 4))
    ctx.measure("tflops", min(by_rank))
    ctx.note("tflops_by_rank", by_rank)
    if ctx.device_kind == "cuda":
        ctx.note("gpu", torch.cuda.get_device_name(torch.device(ctx.device)))


def _matmul_finding(ctx: ProbeContext, dtype_name: str, n: int, error: float, finite: bool) -> Finding:
    """A wrong product: the hardware is suspect until shown otherwise, so the remedy is about the GPU."""
    what = "non-finite values in the product" if not finite else f"relative error {error:.3g}"
    return Finding(
        invariant="matmul_result",
        severity=Severity.ERROR,
        message=f"{dtype_name} {n}x{n} matmul on {ctx.device}: {what} > tolerance {TOLERANCE[dtype_name]:g}",
        stage=ctx.stage,
        expected=f"relative error vs fp64 <= {TOLERANCE[dtype_name]:g}",
        remedy="a wrong matmul is a faulty GPU (or a broken math library): rerun on this GPU alone, check its "
        "health section (ECC, remapped rows, throttling), and drain the node if it repeats",
    )


def _memory(ctx: ProbeContext) -> None:
    import torch

    device = torch.device(ctx.device)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        nbytes = int(free * MEMORY_SHARE) // 4 * 4
        ctx.note("free_bytes", int(free))
        ctx.note("total_bytes", int(total))
    else:
        nbytes = CPU_MEMORY_BYTES
    ctx.enter(f"allocate {nbytes} B")
    block = torch.empty(nbytes // 4, dtype=torch.int32, device=device)
    try:
        ctx.enter(f"write and read back {nbytes} B")
        # each element holds its index within its chunk plus a per-chunk offset: a flipped bit, a lost
        # write or an aliased page shows. Chunked, so the check needs little memory beyond the block.
        for number, chunk in enumerate(_chunks(block)):
            chunk.copy_(_chunk_pattern(number, chunk.numel(), device))
        wrong = sum(
            int((chunk != _chunk_pattern(number, chunk.numel(), device)).sum())
            for number, chunk in enumerate(_chunks(block))
        )
        ctx.note("allocated_bytes", nbytes)
        ctx.note("wrong_elements", wrong)
        if wrong:
            ctx.add_findings(
                [
                    Finding(
                        invariant="memory_readback",
                        severity=Severity.ERROR,
                        message=f"{wrong} of {block.numel()} int32 elements read back wrong from {nbytes} B "
                        f"on {ctx.device}",
                        stage=ctx.stage,
                        expected="every element reads back the value written",
                        remedy="memory that does not read back is a hardware fault: check ECC and remapped rows in the "
                        "health section, reset the GPU, and drain the node if it repeats",
                    )
                ]
            )
    finally:
        del block
        if device.type == "cuda":
            torch.cuda.empty_cache()


CHUNK_ELEMENTS = 1 << 26


def _chunks(block: Any) -> list[Any]:
    return [block[start : start + CHUNK_ELEMENTS] for start in range(0, block.numel(), CHUNK_ELEMENTS)]


def _chunk_pattern(number: int, numel: int, device: Any) -> Any:
    import torch

    return torch.arange(numel, dtype=torch.int32, device=device).add_((number * 7919) % (1 << 20))


def _all_ranks(ctx: ProbeContext, value: float) -> list[float]:
    return [float(v) for v in ctx.all_gather_json(value)]

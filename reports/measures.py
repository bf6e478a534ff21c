"""The numbers probes measure: one table of names, units, labels and whether higher or lower is better, read by
the console, the Markdown, `diff` and Prometheus alike."""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Measure:
    """A number a probe measures; renderers, `diff` and Prometheus read its unit and meaning from here."""

    name: str
    label: str
    unit: str
    help: str
    # "higher" or "lower": compared with a baseline; None: context, never a regression
    better: str | None = None
    headline: bool = False  # shown beside a passing case on the console
    min_ranks: int = 1  # below this world size the number means nothing
    why_not: str = ""  # ...and this says why

    def applies(self, world_size: int) -> bool:
        return world_size >= self.min_ranks


_NO_LINK = "one rank: no data moves between ranks"
# the label says the unit
MEASURES: dict[str, Measure] = {
    m.name: m
    for m in (  # in the order tables show them
        Measure("node_a", "node", "", "one node of a pair (the fabric's pairwise stage)"),
        Measure("node_b", "with node", "", "the other node of the pair"),
        Measure("bytes", "bytes", "B", "size of the collective's largest buffer"),
        Measure("time_us", "time", "us", "time of one operation, averaged over the ranks"),
        Measure("algbw_gbps", "algbw", "GB/s", "algorithm bandwidth in GB/s", "higher", False, 2, _NO_LINK),
        Measure(
            "busbw_gbps",
            "busbw",
            "GB/s",
            "bus bandwidth in GB/s (nccl-tests' definition)",
            "higher",
            True,
            2,
            _NO_LINK,
        ),
        Measure("matmul_size", "n", "", "square matmul size"),
        Measure("relative_error", "relative error", "", "relative Frobenius error against fp64"),
        Measure("error_tolerance", "tolerance", "", "the largest relative error that passes"),
        Measure("tflops", "TFLOP/s", "", "achieved TFLOP/s of the slowest rank", "higher", True),
    )
}


def format_measure(name: str, value: float | None, world_size: int) -> str:
    """`busbw 1.2 GB/s`; `busbw —` with the reason where the measure means nothing at this world size."""
    measure = MEASURES[name]
    if not measure.applies(world_size) or value is None:
        return f"{measure.label} — ({measure.why_not or 'not measured'})"
    return f"{measure.label} {value:g}" + (f" {measure.unit}" if measure.unit else "")


def on_shared_gpu(result: object) -> bool:
    """Whether a case's ranks shared one GPU (issue 23: more ranks than GPUs): what they measured between them
    crossed no interconnect, so it is never a node's bandwidth figure (no median, no flag, no baseline ratio).
    Read from a result record's `shared_gpu`, or a result dict's."""
    shared = result.get("shared_gpu") if isinstance(result, dict) else getattr(result, "shared_gpu", None)
    return bool(shared)


def finite(value: object) -> float | None:
    """A number from a report as a float, or None where it is none (a bool, null, 1e400 as an integer): a report is
    data from anywhere."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None

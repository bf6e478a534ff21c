"""The numbers probes measure: one registry of names, units, labels and whether higher or lower is better, read by
the console, the Markdown, `diff` and Prometheus alike.

It is seeded with the built-in families' measures; a probe that measures something new declares it beside its spec
(`register_measure(Measure(...))` in its own module, run when the probe registry imports it), so a third-party
probe's number is drawn, compared and exported exactly as a built-in's is. A report read where that probe is not
installed keeps the number in its JSON; the renderers show only the measures they know.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import types
from collections.abc import Iterator, Mapping


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

    def __post_init__(self) -> None:
        if self.better not in (None, "higher", "lower"):
            raise ValueError(
                f"measure {self.name!r}: better is 'higher', 'lower' or None, not {self.better!r}"
            )

    def applies(self, world_size: int) -> bool:
        return world_size >= self.min_ranks


_NO_LINK = "one rank: no data moves between ranks"
# the label says the unit; in the order tables show them (a registered measure comes after these)
_BUILT_IN = (
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
_REGISTERED: dict[str, Measure] = {m.name: m for m in _BUILT_IN}
#: Every known measure by name, in table order: the built-in ones, then those registered. A read-only view of the
#: registry (it sees what is registered later); add to it with `register_measure`.
MEASURES: Mapping[str, Measure] = types.MappingProxyType(_REGISTERED)


def register_measure(measure: Measure) -> Measure:
    """Add `measure` to the registry and return it: a probe declares what it measures beside its spec,
    `STEP_MS = register_measure(Measure("step_ms", ...))`. The same measure registered again (a module imported
    twice) is a no-op; another measure under a known name is refused, naming both."""
    known = _REGISTERED.get(measure.name)
    if known is not None and known != measure:
        raise ValueError(f"measure {measure.name!r} is already registered as {known}; not as {measure}")
    _REGISTERED[measure.name] = measure
    return measure


@contextlib.contextmanager
def registered_measures(*measures: Measure) -> Iterator[tuple[Measure, ...]]:
    """`measures` registered for the time of a `with` block (a test's), then the registry as it was."""
    before = dict(_REGISTERED)
    try:
        yield tuple(register_measure(m) for m in measures)
    finally:
        _REGISTERED.clear()
        _REGISTERED.update(before)


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

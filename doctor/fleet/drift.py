"""Measures that drift across nights (`ds-doctor fleet --since 30d`): a slowly failing GPU, a link that degrades.

Tonight's fleet view sets each node against tonight's median; a node that loses 2 % a night is inside any
tolerance for a week and gone a month later. Here every node's compared measure (busbw, algbw, TFLOP/s, within
the nodes of the same GPU models) is read night by night as its ratio to that night's fleet median (so a change of
the whole fleet, a driver upgrade, a busy fabric night, moves no node), and a straight line is fitted to the
logarithm of that ratio against the night. A node is named when the line says three things at once:

- it gets worse (lower where higher is better, higher where lower is),
- by more than the fleet's tolerance over the nights read (`--tolerance`, 10 % by default), and
- the slope is at least MIN_T standard errors from flat: a noisy node whose nights scatter 3 % is not a drift.

The slope is reported as a percent a night with its standard error, over how many nights: what the evidence shows,
and how sure it is. At least MIN_NIGHTS nights of a measure are needed; fewer say nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import statistics
from collections.abc import Iterable, Sequence

from ds_doctor.reports.fleet import Drift
from ds_doctor.reports.measures import MEASURES

MIN_NIGHTS = 5
MIN_T = (
    5.0  # over 100,000 series of noise, a slope 5 standard errors from flat is about one chance in a thousand
)
MIN_FLEET = 3  # nodes of a night below which a night's median is no fleet's: the series' own median is used


@dataclasses.dataclass(frozen=True)
class NightValue:
    """One compared measure of one node's run."""

    host: str
    gpus: str
    case: str
    measure: str
    night: dt.date
    value: float
    at: str = ""  # the run's start (ISO): of two runs of one night, the later one counts


def _newest(values: Iterable[NightValue]) -> dict[tuple[str, str, str, str], dict[dt.date, float]]:
    """(host, gpus, case, measure) -> night -> the value of that night's latest run (positive, finite only)."""
    series: dict[tuple[str, str, str, str], dict[dt.date, tuple[str, float]]] = {}
    for item in values:
        if not (math.isfinite(item.value) and item.value > 0) or item.measure not in MEASURES:
            continue
        nights = series.setdefault((item.host, item.gpus, item.case, item.measure), {})
        held = nights.get(item.night)
        if held is None or item.at >= held[0]:
            nights[item.night] = (item.at, item.value)
    return {key: {night: value for night, (_, value) in nights.items()} for key, nights in series.items()}


def _medians(
    series: dict[tuple[str, str, str, str], dict[dt.date, float]],
) -> dict[tuple[str, str, str, dt.date], float]:
    """(gpus, case, measure, night) -> the median over the nodes of that night, where MIN_FLEET nodes ran it."""
    by_night: dict[tuple[str, str, str, dt.date], list[float]] = {}
    for (_, gpus, case, measure), nights in series.items():
        for night, value in nights.items():
            by_night.setdefault((gpus, case, measure, night), []).append(value)
    return {key: statistics.median(values) for key, values in by_night.items() if len(values) >= MIN_FLEET}


def fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least squares slope of y over x, and its standard error (0 for points on a line; at least 3 points, two
    nights apart at least)."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    residual = sum((y - mean_y - slope * (x - mean_x)) ** 2 for x, y in points)
    return slope, math.sqrt(residual / (n - 2) / sxx)


@dataclasses.dataclass(frozen=True)
class Series:
    """One (node, case, measure) series fitted: the line through the logarithm of its ratio to the fleet, night
    by night. Fitted here from NightValues, or by DuckDB over a results table (`ds_doctor.table.query`)."""

    host: str
    gpus: str
    case: str
    measure: str
    nights: int
    first_night: dt.date
    last_night: dt.date
    first_value: float
    last_value: float
    slope: float  # of the log ratio, a night
    error: float  # its standard error (0 for points on a line)


def drifting(series: Iterable[Series], tolerance_pct: float) -> list[Drift]:
    """The fitted series that get worse steadily (the rule of the module's docstring), worst first."""
    found = []
    for one in series:
        span = (one.last_night - one.first_night).days
        if one.nights < MIN_NIGHTS or span == 0 or one.measure not in MEASURES:
            continue
        sign = 1 if MEASURES[one.measure].better == "higher" else -1
        change = math.expm1(one.slope * span) * 100
        sure = abs(one.slope) >= MIN_T * one.error if one.error > 0 else one.slope != 0
        if sign * one.slope < 0 and abs(change) >= tolerance_pct and sure:
            found.append(
                Drift(
                    host=one.host,
                    case=one.case,
                    measure=one.measure,
                    gpus=one.gpus,
                    nights=one.nights,
                    first_night=one.first_night.isoformat(),
                    last_night=one.last_night.isoformat(),
                    first_value=one.first_value,
                    last_value=one.last_value,
                    pct_per_night=round(math.expm1(one.slope) * 100, 3),
                    error_pct=round(one.error * 100, 3),
                    change_pct=round(change, 2),
                )
            )
    found.sort(key=lambda d: (-abs(d.change_pct), d.host, d.case, d.measure))
    return found


def fitted(values: Iterable[NightValue]) -> list[Series]:
    """Each (node, case, measure) series of MIN_NIGHTS nights or more, fitted."""
    series = _newest(values)
    medians = _medians(series)
    found = []
    for (host, gpus, case, measure), nights in series.items():
        if len(nights) < MIN_NIGHTS:
            continue
        own = statistics.median(nights.values())
        ordered = sorted(nights)
        first = ordered[0]
        points = [
            ((night - first).days, math.log(nights[night] / medians.get((gpus, case, measure, night), own)))
            for night in ordered
        ]
        slope, error = fit(points)
        found.append(
            Series(
                host,
                gpus,
                case,
                measure,
                len(nights),
                first,
                ordered[-1],
                nights[first],
                nights[ordered[-1]],
                slope,
                error,
            )
        )
    return found


def drifts(values: Iterable[NightValue], tolerance_pct: float) -> list[Drift]:
    """The (node, case, measure) series that get worse steadily across nights, worst first."""
    return drifting(fitted(values), tolerance_pct)


def parse_since(text: str, now: dt.datetime) -> dt.date:
    """`--since`: `30d`, `2w`, `36h` back from `now`, or a date (`2026-11-01`): the first night read."""
    text = text.strip()
    units = {"h": dt.timedelta(hours=1), "d": dt.timedelta(days=1), "w": dt.timedelta(weeks=1)}
    if text[-1:].lower() in units and text[:-1].isdigit():
        count = int(text[:-1])
        if not 0 < count <= 3660:
            raise ValueError(f"{text!r}: give 1 to 3660 {text[-1]}")
        return (now - count * units[text[-1].lower()]).date()
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text[:40]!r} is neither a span (30d, 2w, 36h) nor a date (2026-11-01)") from None

"""The HTML report's pictures, as inline markup (no script, no file, no network): a case's device map as a stage x
role grid coloured by device, and line charts (the equivalence family's loss and gradient norm per step, `comm`'s
bandwidth against message size, a fleet's nodes against their median).

Charts are SVG written here rather than drawn by a plotting library: a GPU node often has no package index, the
pictures are a few lines and axes, and SVG text scales and prints. Every string from the report is escaped
(`markupsafe.escape`) before it becomes markup. docs/html-report.md says what a reader learns from each picture.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

from markupsafe import Markup, escape

from ds_doctor.reports.model import CaseResult, TensorRecord

#: one colour per kind of device (Tableau 10): where a tensor lives is what the grid is for
DEVICE_COLOURS = {
    "cpu": "#4e79a7",
    "cuda": "#59a14f",
    "meta": "#bab0ac",
    "disk": "#f28e2b",
    "nvme": "#f28e2b",
    "xpu": "#76b7b2",
    "hpu": "#edc948",
    "mps": "#ff9da7",
}
OTHER_COLOUR = "#b07aa1"
SERIES_COLOURS = ("#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948", "#9c755f")


def device_colour(device: str) -> str:
    return DEVICE_COLOURS.get(device.split(":")[0], OTHER_COLOUR)


def _key(record: TensorRecord) -> tuple[int, str, str, str, int | None]:
    return (record.rank, record.stage, record.role, record.path, record.node)


def offending(result: CaseResult) -> set[tuple[int, str, str, str, int | None]]:
    """The records the case's findings name as evidence."""
    return {_key(record) for finding in result.findings for record in finding.evidence}


def _ordered(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _fill(devices: dict[str, int]) -> str:
    """A cell's background: one colour, or stripes in proportion to how many tensors each device holds."""
    total = sum(devices.values())
    if len(devices) == 1:
        return device_colour(next(iter(devices)))
    stops, start = [], 0.0
    for device, count in devices.items():
        end = start + 100.0 * count / total
        stops.append(f"{device_colour(device)} {start:.1f}% {end:.1f}%")
        start = end
    return f"linear-gradient(90deg, {', '.join(stops)})"


def device_map_grid(result: CaseResult) -> Markup:
    """Rows are the stages in the order they were recorded, columns the roles (parameter, gradient, fp32 partition,
    optimizer state, ...); each cell holds how many tensors (ranks together) and is coloured by their devices. A cell
    holding a record a finding names is outlined in red and says which."""
    records = result.device_map
    if not records:
        return Markup("")
    bad = offending(result)
    stages = _ordered(r.stage for r in records)
    roles = _ordered(r.role for r in records)
    cells: dict[tuple[str, str], list[TensorRecord]] = {}
    for record in records:
        cells.setdefault((record.stage, record.role), []).append(record)
    head = "".join(f"<th>{escape(role)}</th>" for role in roles)
    rows = []
    for stage in stages:
        tds = []
        for role in roles:
            held = cells.get((stage, role), [])
            if not held:
                tds.append('<td class="empty"></td>')
                continue
            devices: dict[str, int] = {}
            for record in held:
                devices[record.device] = devices.get(record.device, 0) + 1
            flagged = [r for r in held if _key(r) in bad]
            where = ", ".join(f"{count} on {device}" for device, count in devices.items())
            title = f"{stage} / {role}: {where}"
            if flagged:
                title += "; named by a finding: " + ", ".join(
                    f"{r.path} (rank {r.rank}, {r.device})" for r in flagged[:8]
                )
            tds.append(
                f'<td class="{"cell bad" if flagged else "cell"}" style="background: {_fill(devices)}" '
                f'title="{escape(title)}">{len(held)}{" !" if flagged else ""}</td>'
            )
        rows.append(f"<tr><th class='stage'>{escape(stage)}</th>{''.join(tds)}</tr>")
    # (colour, kind) pairs: a device name from data may hold any character, a NUL too
    kinds = list(dict.fromkeys((device_colour(r.device), r.device.split(":")[0]) for r in records))
    legend = "".join(
        f'<span class="swatch" style="background: {colour}"></span>{escape(kind)} ' for colour, kind in kinds
    )
    return Markup(
        f'<table class="grid" aria-label="device map of {escape(result.label)}"><tr><th></th>{head}</tr>'
        f"{''.join(rows)}</table><p class='legend'>{legend}"
        f"{'<span class=bad-key>! a finding names a tensor here</span>' if bad else ''}</p>"
    )


@dataclasses.dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[tuple[float, float]]
    dashed: bool = False


def _finite(points: Iterable[tuple[float, float]], log_x: bool) -> list[tuple[float, float]]:
    return [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y) and (x > 0 or not log_x)]


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    step = (high - low) / (count - 1)
    return [low + i * step for i in range(count)]


def _label(value: float) -> str:
    if value != 0 and (abs(value) >= 1e5 or abs(value) < 1e-3):
        return f"{value:.1e}"
    return f"{value:.4g}"


def _bytes_label(value: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.4g} {unit}"
    return f"{value:.0f} B"


WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 520, 240, 64, 150, 16, 40


@dataclasses.dataclass(frozen=True)
class _Frame:
    """The plot area and the scales of a chart."""

    x0: float
    x1: float
    y0: float
    y1: float
    log_x: bool

    @classmethod
    def around(cls, xs: list[float], ys: list[float], log_x: bool) -> _Frame:
        fx = [math.log10(x) if log_x else x for x in xs]
        x0, x1, y0, y1 = min(fx), max(fx), min(ys), max(ys)
        if y0 == y1:
            y0, y1 = y0 - (abs(y0) or 1) * 0.05, y1 + (abs(y1) or 1) * 0.05
        if x0 == x1:
            x0, x1 = x0 - 1, x1 + 1
        return cls(x0, x1, y0, y1, log_x)

    def px(self, x: float) -> float:
        value = math.log10(x) if self.log_x else x
        return LEFT + (value - self.x0) / (self.x1 - self.x0) * (WIDTH - LEFT - RIGHT)

    def py(self, y: float) -> float:
        return TOP + (1 - (y - self.y0) / (self.y1 - self.y0)) * (HEIGHT - TOP - BOTTOM)


def _axes(frame: _Frame, xs: list[float], bytes_x: bool) -> list[str]:
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>']
    for y in _ticks(frame.y0, frame.y1):
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{frame.py(y):.1f}" y2="{frame.py(y):.1f}" stroke="#eee"/>'
            f'<text x="{LEFT - 4}" y="{frame.py(y) + 4:.1f}" text-anchor="end">{escape(_label(y))}</text>'
        )
    ticks = sorted(set(xs))
    if len(ticks) > 8:
        ticks = [10**t if frame.log_x else t for t in _ticks(frame.x0, frame.x1)]
    for x in ticks:
        text = _bytes_label(x) if bytes_x else _label(x)
        parts.append(
            f'<text x="{frame.px(x):.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">{escape(text)}</text>'
        )
    return parts


def _lines(frame: _Frame, kept: list[tuple[Series, list[tuple[float, float]]]]) -> list[str]:
    parts = []
    for index, (line, pts) in enumerate(kept):
        colour = SERIES_COLOURS[index % len(SERIES_COLOURS)]
        path = " ".join(f"{frame.px(x):.1f},{frame.py(y):.1f}" for x, y in sorted(pts))
        dash = ' stroke-dasharray="5 3"' if line.dashed else ""
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        parts += [
            f'<circle cx="{frame.px(x):.1f}" cy="{frame.py(y):.1f}" r="2.5" fill="{colour}"/>' for x, y in pts
        ]
        ly = TOP + 12 + index * 16
        parts.append(
            f'<line x1="{WIDTH - RIGHT + 10}" x2="{WIDTH - RIGHT + 28}" y1="{ly - 4}" y2="{ly - 4}" '
            f'stroke="{colour}" stroke-width="2"{dash}/>'
            f'<text x="{WIDTH - RIGHT + 32}" y="{ly}">{escape(line.name[:20])}</text>'
        )
    return parts


def line_chart(
    title: str,
    series: Sequence[Series],
    x_label: str,
    y_label: str,
    *,
    log_x: bool = False,
    mark_x: float | None = None,
    bytes_x: bool = False,
) -> Markup:
    """Lines with points, one colour per series and a legend on the right; `mark_x` draws a red vertical line (the
    first step over the tolerance). Non-finite values are left out (a NaN loss is said in the text beside it)."""
    kept = [(s, pts) for s in series if (pts := _finite(s.points, log_x))]
    if not kept:
        return Markup("")
    xs = [x for _, pts in kept for x, _ in pts]
    frame = _Frame.around(xs, [y for _, pts in kept for _, y in pts], log_x)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        *_axes(frame, xs, bytes_x),
    ]
    if mark_x is not None and (not log_x or mark_x > 0):
        parts.append(
            f'<line class="mark" x1="{frame.px(mark_x):.1f}" x2="{frame.px(mark_x):.1f}" y1="{TOP}" '
            f'y2="{TOP + plot_h}" stroke="#d62728" stroke-width="1.5"/>'
        )
    parts += _lines(frame, kept)
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 6}" text-anchor="middle">{escape(x_label)}</text>'
        f'<text x="12" y="{TOP + plot_h / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {TOP + plot_h / 2:.0f})">{escape(y_label)}</text></svg>'
    )
    return Markup("".join(parts))


def ratio_bars(title: str, bars: Sequence[tuple[str, float, bool]], tolerance_pct: float) -> Markup:
    """One horizontal bar per node: its value over its group's median (1 is the median), red where it is below by
    more than the tolerance; a line at the median and a dashed one at the tolerance's edge."""
    kept = [(name, ratio, below) for name, ratio, below in bars if math.isfinite(ratio) and ratio >= 0]
    if not kept:
        return Markup("")
    row, label_w, plot_w, first = 18, 170, 300, TOP + 14  # `first`: below the visible title
    top = max(1.2, max(ratio for _, ratio, _ in kept) * 1.05)
    height = first + row * len(kept) + 30

    def px(ratio: float) -> float:
        return label_w + ratio / top * plot_w

    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {label_w + plot_w + 70} {height}" width="{label_w + plot_w + 70}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>'
        f'<text x="0" y="12" font-weight="600">{escape(title)}</text>'
    ]
    for index, (name, ratio, below) in enumerate(kept):
        y = first + index * row
        colour = "#d62728" if below else "#4e79a7"
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{escape(name[:28])}</text>'
            f'<rect x="{label_w}" y="{y + 2}" width="{max(px(ratio) - label_w, 1):.1f}" height="{row - 5}" '
            f'fill="{colour}"/><text x="{px(ratio) + 4:.1f}" y="{y + 12}">{ratio:.2f}</text>'
        )
    bottom = first + row * len(kept)
    edge = 1 - tolerance_pct / 100
    parts.append(
        f'<line x1="{px(1):.1f}" x2="{px(1):.1f}" y1="{first - 4}" y2="{bottom}" stroke="#333"/>'
        f'<line x1="{px(edge):.1f}" x2="{px(edge):.1f}" y1="{first - 4}" y2="{bottom}" stroke="#d62728" '
        f'stroke-dasharray="4 3"/><text x="{px(1):.1f}" y="{bottom + 14}" text-anchor="middle">median</text>'
        f'<text x="{px(edge):.1f}" y="{bottom + 26}" text-anchor="middle">-{tolerance_pct:g} %</text></svg>'
    )
    return Markup("".join(parts))

"""The HTML report: one self-contained page (styles inline, pictures as inline SVG and tables, no script, nothing
fetched) beside the JSON and the Markdown, for the reader who would rather look than read.

It says what the ticket says, in the same order (the verdict, what needs a look, what ran, every case, the
environment), and adds the pictures (`ds_doctor.reports.pictures`): each case's device map as a grid coloured by
device, a route's loss and gradient norm per step against its reference's, bus bandwidth against message size (each
a view of the case, `ds_doctor.reports.views`: no probe is named here). The page is a Jinja2 template
(`report.html.j2`) with autoescaping on: every string from the report is escaped, and the only markup that is not
comes from `pictures`, which escapes what it puts in. Every `{{ }}` also shows control and invisible characters
escaped (`_shown`, the environment's `finalize`): no raw ESC, BEL or right-to-left override.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from ds_doctor.reports.markdown import FAILING, environment_rows, fold_own_frames, identical_failures
from ds_doctor.reports.measures import MEASURES
from ds_doctor.reports.model import CaseResult, Outcome, Report, Verdict
from ds_doctor.reports.pictures import Series, device_map_grid, line_chart
from ds_doctor.reports.safe import visible
from ds_doctor.reports.views import BandwidthCurve, StepTable, view_of
from ds_doctor.reports.whatran import what_ran

TEMPLATE = "report.html.j2"


def _shown(value: Any) -> Any:
    """Every `{{ }}` of the templates (Jinja's `finalize`), before autoescaping: control and invisible characters
    shown escaped (`visible`), in text and in the markup of `pictures` and the macros alike (markup itself holds
    none). Numbers, booleans and None are left for Jinja to write."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if hasattr(value, "__html__"):
        return Markup(visible(value.__html__()))
    return visible(value)


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).resolve().parent),
        autoescape=True,
        finalize=_shown,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def step_charts(result: CaseResult) -> Markup:
    """Loss and gradient norm per step (`StepTable`), the route's solid and the reference's dashed; a red line at the
    first step a finding names."""
    table = view_of(result, StepTable)
    if table is None:
        return Markup("")
    steps = table.steps
    first = min(
        (int(f.data["step"]) for f in result.findings if isinstance(f.data.get("step"), int)), default=None
    )
    charts = []
    for quantity, title in (("loss", "loss"), ("grad_norm", "gradient norm")):
        points = [(s.number, s.values[quantity]) for s in steps if quantity in s.values]
        if not points:
            continue
        charts.append(
            line_chart(
                f"{result.label}: {title} per step",
                [
                    Series("route", [(float(n), p.route) for n, p in points]),
                    Series("reference", [(float(n), p.reference) for n, p in points], dashed=True),
                ],
                "step",
                title,
                mark_x=float(first) if first is not None else None,
            )
        )
    return Markup("").join(charts)


def bandwidth_chart(report: Report) -> Markup:
    """Bus bandwidth against message size (`BandwidthCurve`), one line per case (a collective at a world size), the
    title naming the families that measured them."""
    curves = [curve for result in report.results if (curve := view_of(result, BandwidthCurve)) is not None]
    if not curves:
        return Markup("")
    families = ", ".join(dict.fromkeys(curve.family for curve in curves))
    return line_chart(
        f"{families}: bus bandwidth against message size",
        [Series(curve.name, list(curve.points)) for curve in curves],
        "message size",
        "busbw (GB/s)",
        log_x=True,
        bytes_x=True,
    )


def _verdict(report: Report) -> dict[str, Any]:
    failing = [r for r in report.results if r.outcome in FAILING]
    reproduced, absent = report.library_trap_counts
    return {
        "failing": len(failing),
        "kinds": {
            o.value: sum(r.outcome == o for r in failing)
            for o in FAILING
            if any(r.outcome == o for r in failing)
        },
        "affected": [i["id"] for i in report.affecting_issues],
        "reproduced": reproduced,
        "absent": absent,
    }


def _measures(result: CaseResult) -> str:
    return ", ".join(
        f"{MEASURES[name].label} {value:g}"
        for name, value in result.applicable_measures().items()
        if value is not None
    )


def render_html(report: Report) -> str:
    """The page for `report` (already scrubbed where it was built, like every format)."""
    needs_look = [r for r in report.results if r.outcome in FAILING]
    reproduced = [r for r in report.results if r.outcome in (Outcome.XFAIL, Outcome.XPASS)]
    affected = [
        r for r in reproduced if r.known_issue is not None and r.known_issue.verdict == Verdict.AFFECTED
    ]
    traps = [r for r in reproduced if all(r is not a for a in affected)]
    others = [
        r
        for r in report.results
        if r.outcome not in (*FAILING, Outcome.XFAIL, Outcome.XPASS)
        and (r.device_map or view_of(r, StepTable))
    ]
    return (
        _environment()
        .get_template(TEMPLATE)
        .render(
            report=report,
            verdict=_verdict(report),
            needs_look=needs_look,
            groups=identical_failures(report),
            affected=affected,
            traps=traps,
            others=others,
            environment=environment_rows(report),
            ran=what_ran(report),
            bandwidth=bandwidth_chart(report),
            grid=device_map_grid,
            charts=step_charts,
            measures=_measures,
            fold=fold_own_frames,
            env=report.env,
        )
    )


CHART_BARS = 40  # bars a fleet chart draws at most


def fleet_charts(fleet: Any) -> list[Markup]:
    """One bar chart per (case, measure, GPU group): each node's value over the group's median."""
    from ds_doctor.reports.pictures import ratio_bars

    groups: dict[tuple[str, str, str], list[tuple[str, float, bool]]] = {}
    for node in fleet.nodes:
        for cell in node.measures:
            if cell.median:
                ratio = cell.value / cell.median
                if (
                    MEASURES.get(cell.measure) is not None
                    and MEASURES[cell.measure].better == "lower"
                    and cell.value
                ):
                    ratio = cell.median / cell.value  # always: below 1 is worse
                groups.setdefault((cell.case, cell.measure, cell.gpus), []).append(
                    (node.host, ratio, cell.below)
                )
    charts = []
    for (case, measure, gpus), bars in sorted(groups.items()):
        title = f"{case} {MEASURES[measure].label if measure in MEASURES else measure} ({gpus})"
        if len(bars) > CHART_BARS:  # a cluster: the lowest nodes, which the chart is there for
            bars = sorted(bars, key=lambda bar: bar[1])[:CHART_BARS]
            title += f": the {CHART_BARS} lowest of {len(groups[(case, measure, gpus)]):,} nodes"
        charts.append(ratio_bars(title, bars, fleet.tolerance_pct))
    return charts


def render_fleet_html(fleet: Any) -> str:
    """The fleet as one self-contained page: the nodes' table and each node against its group's median."""
    from ds_doctor.reports.fleet import ALL_ROWS

    quiet = {id(node) for node in fleet.quiet} if len(fleet.nodes) > ALL_ROWS else set()
    return (
        _environment()
        .get_template("fleet.html.j2")
        .render(
            fleet=fleet,
            failing=sum(node.failed for node in fleet.nodes),
            charts=fleet_charts(fleet),
            shown=[n for n in fleet.nodes if id(n) not in quiet],
            labels={name: m.label for name, m in MEASURES.items()},
        )
    )

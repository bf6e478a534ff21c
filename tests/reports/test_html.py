"""The HTML report: the ticket's order, pictures built from the report, every string escaped, nothing fetched.
tests/test_e2e.py opens a real level-3 run's page in headless chromium."""

from __future__ import annotations

import dataclasses
import re

from ds_doctor.reports.html import render_html
from ds_doctor.reports.model import Outcome
from ds_doctor.reports.pictures import DEVICE_COLOURS, Series, line_chart
from tests.reports.samples import (
    TOKEN,
    a_failed_case,
    a_report,
    a_user_config_case,
    an_equivalence_case,
    case,
    every_outcome,
)


def test_the_page_leads_like_the_ticket() -> None:
    page = render_html(a_report([a_failed_case(), an_equivalence_case(), a_user_config_case()]))
    order = [
        "case(s) need a look",
        "<h2>Cases that need a look",
        "<h2>What ran",
        "<h2>Every case",
        "<h2>Environment",
    ]
    positions = [page.index(marker) for marker in order]
    assert positions == sorted(positions), list(zip(order, positions, strict=True))
    assert "<code>hf:gpt2 (GPT2LMHeadModel, 0.12 M parameters)</code>: 1 case(s)" in page
    assert "<code>auto</code> filled: <code>train_micro_batch_size_per_gpu</code> = <code>4</code>" in page


def test_the_device_map_grid_is_coloured_by_device_and_outlines_what_a_finding_names() -> None:
    page = render_html(a_report([a_failed_case()]))
    grid = page[page.index('<table class="grid"') : page.index("</table>", page.index('<table class="grid"'))]
    assert "<th>fp32_partition</th>" in grid and "<th class='stage'>after_step</th>" in grid
    # the one partition on `meta`, named by the finding: outlined, said in the cell's title, meta's colour
    assert 'class="cell bad"' in grid and f"background: {DEVICE_COLOURS['meta']}" in grid
    assert "named by a finding: optimizer.fp32_partitioned_groups_flat[0] (rank 1, meta)" in grid
    healthy = dataclasses.replace(a_failed_case(), findings=(), outcome=Outcome.PASS)
    assert 'class="cell bad"' not in render_html(a_report([healthy]))


def test_an_equivalence_case_draws_route_and_reference_and_marks_the_first_step_over() -> None:
    page = render_html(a_report([an_equivalence_case()]))
    charts = re.findall(r"<svg class=\"chart\".*?</svg>", page, flags=re.S)
    titles = [re.search(r"<title>(.*?)</title>", chart).group(1) for chart in charts]  # type: ignore[union-attr]
    assert titles == [
        "equivalence[trainer-num-items-ws2]: loss per step",
        "equivalence[trainer-num-items-ws2]: gradient norm per step",
    ]
    for chart in charts:
        assert chart.count("<polyline") == 2 and 'stroke-dasharray="5 3"' in chart  # the reference dashed
        assert chart.count('class="mark"') == 1  # step 1, where the finding says it diverged
        assert chart.count("<circle") == 8  # 4 steps x 2 series


def test_comm_bandwidth_is_drawn_against_message_size_for_multi_rank_cases_only() -> None:
    rows = tuple({"bytes": 4096 * 16**i, "busbw_gbps": 0.5 * (i + 1)} for i in range(4))
    two = case(Outcome.PASS, "all_reduce", probe="comm", world_size=2, series=rows)
    one = case(Outcome.PASS, "all_gather", probe="comm", world_size=1, series=rows)
    page = render_html(a_report([two, one]))
    assert "<title>comm: bus bandwidth against message size</title>" in page
    assert ">all_reduce-ws2</text>" in page and ">all_gather-ws1</text>" not in page
    assert ">4 KiB</text>" in page and ">16 MiB</text>" in page


def test_a_chart_leaves_out_what_is_not_finite_and_draws_nothing_from_nothing() -> None:
    chart = line_chart("t", [Series("a", [(1.0, float("nan")), (2.0, 1.0), (3.0, float("inf"))])], "x", "y")
    assert chart.count("<circle") == 1
    assert line_chart("t", [Series("a", [(1.0, float("nan"))])], "x", "y") == ""


def test_every_string_from_the_report_is_escaped_and_secrets_stay_redacted() -> None:
    hostile = case(
        Outcome.ERROR,
        "boom",
        reason='<script>alert(1)</script><img src=x onerror="alert(2)">',
        notes={"model": "</code><iframe src=//evil>"},
    )
    page = render_html(a_report([hostile, a_failed_case()]))
    assert "<script" not in page and "<iframe" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert TOKEN not in page


def test_the_page_fetches_nothing() -> None:
    """Self-contained: no script, no link, no image or style from elsewhere; the CSP forbids fetching anyway."""
    page = render_html(a_report([*every_outcome(), an_equivalence_case(), a_user_config_case()]))
    assert not re.search(r"\b(src|href)\s*=|url\(|@import|<script|<link", page)
    assert "default-src 'none'" in page
    assert (
        [m for m in re.findall(r"https?://[^\s\"'<]+", page) if m != "http://www.w3.org/2000/svg"]
        == [
            "https://github.com/deepspeedai/DeepSpeed/issues/5538"  # text of the known issue's references, not a link
        ]
    )


def test_the_notes_a_probe_marks_for_a_reader_are_on_the_page() -> None:
    shown = dataclasses.replace(
        an_equivalence_case(),
        notes={**an_equivalence_case().notes, "divergence_starts": "step 1: <by_world> first"},
        shown_notes=("divergence_starts",),
    )
    page = render_html(a_report([shown]))
    assert "<strong>Divergence starts:</strong> step 1: &lt;by_world&gt; first" in page


def test_identical_failures_are_one_card_with_the_list_of_the_others() -> None:
    same = [
        case(
            Outcome.ERROR,
            f"z{i}",
            reason="did not finish: the run stopped before every rank reported this case",
        )
        for i in range(30)
    ]
    page = render_html(a_report(same))
    assert page.count('<div class="card error"') == 1
    assert "The same error, with the same reason, in 29 more case(s):" in page and "and 9 more" in page

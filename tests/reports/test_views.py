"""Views (`ds_doctor.reports.views`): the renderers draw what a case carries, whichever probe wrote it. A third-party
probe's step table is a table and charts, its bandwidth rows a curve; ds-doctor's own families carry theirs by name."""

from __future__ import annotations

from typing import Any

import pytest

from ds_doctor.reports.html import render_html
from ds_doctor.reports.markdown import render_markdown
from ds_doctor.reports.model import CaseResult, Finding, Outcome, Report, Severity
from ds_doctor.reports.views import (
    AccelerateConfigNote,
    BandwidthCurve,
    DeepSpeedConfigNote,
    GpuCheck,
    HangSource,
    ModelNote,
    NodeRecordCheck,
    Showed,
    StepTable,
    register,
    view_of,
    views,
    views_of,
)
from ds_doctor.reports.whatran import what_ran

STEPS = {
    "tolerance": "1e-6 relative",
    "steps": [
        {"loss": {"route": 2.0, "reference": 2.0}, "grad_norm": {"route": 1.0, "reference": 1.0}},
        {"loss": {"route": 2.5, "reference": 2.0}},
    ],
}
ROWS = ({"bytes": 1024, "busbw_gbps": 1.0}, {"bytes": 1 << 20, "busbw_gbps": 4.0})


def case(
    probe: str, variant: str, outcome: Outcome = Outcome.PASS, world_size: int = 2, **fields: Any
) -> CaseResult:
    return CaseResult(
        probe, f"{probe}[{variant}-ws{world_size}]", "smoke", 2, world_size, "cpu", outcome, 0.5, **fields
    )


def report_of(*results: CaseResult) -> Report:
    from ds_doctor.run.build import build_report, utc_now

    now = utc_now()
    return build_report(
        started=now,
        finished=now,
        level=2,
        argv=(),
        env={"python": "3.11", "packages": {}},
        hardware={"host": "h", "cpus": 1, "memory_bytes": 1, "gpus": []},
        results=list(results),
        run_dir=None,
    )


def test_a_step_table_is_drawn_whichever_probe_published_it() -> None:
    mine = case("my_probe", "route", Outcome.FAIL, notes={StepTable.NOTE: STEPS}, reason="diverged")
    table = view_of(mine, StepTable)
    assert table is not None and table.tolerance == "1e-6 relative"
    assert [sorted(step.values) for step in table.steps] == [["grad_norm", "loss"], ["loss"]]
    report = report_of(mine)
    assert "Steps (relative gap; tolerance: 1e-6 relative):" in render_markdown(report)
    assert "my_probe[route-ws2]: loss per step" in render_html(report)


def test_bandwidth_rows_are_a_curve_of_their_own_family() -> None:
    mine = case("my_bench", "all_reduce", series=ROWS)
    curve = view_of(mine, BandwidthCurve)
    assert curve == BandwidthCurve("my_bench", "all_reduce-ws2", ((1024.0, 1.0), (1048576.0, 4.0)))
    pairs = case("my_fabric", "pairs", series=tuple({**row, "node_a": 0, "node_b": 1} for row in ROWS))
    one_rank = case("my_bench", "all_gather", world_size=1, series=ROWS)
    assert view_of(pairs, BandwidthCurve) is None and view_of(one_rank, BandwidthCurve) is None
    page = render_html(report_of(mine, pairs, one_rank, case("comm", "all_reduce", series=ROWS)))
    assert "my_bench, comm: bus bandwidth against message size" in page


def test_what_ran_reads_the_models_and_configs_any_case_published() -> None:
    config = {"path": "/c.json", "sha256": "ab" * 32, "filled": {"a": 1}, "changed": {"b": "why"}}
    results = [
        case("p", "a", notes={ModelNote.NOTE: "hf:llama (tiny)", DeepSpeedConfigNote.NOTE: config}),
        case(
            "q",
            "b",
            notes={ModelNote.NOTE: "hf:llama (tiny)", AccelerateConfigNote.NOTE: {"path": "/a.yaml"}},
        ),
    ]
    ran = what_ran(report_of(*results))
    assert ran.models == (("hf:llama (tiny)", 2),)
    assert ran.deepspeed is not None and (ran.deepspeed.path, ran.deepspeed.cases) == ("/c.json", 1)
    assert ran.deepspeed.changed == {"b": "why"} and ran.deepspeed.left_to_deepspeed == ()
    assert ran.accelerate is not None and ran.accelerate.path == "/a.yaml"


@pytest.mark.parametrize(
    ("notes", "expected"),
    [
        ({}, ()),
        ({Showed.NOTE: ["a", 2]}, ("a", "2")),
        ({Showed.NOTE: "one"}, ("one",)),
        ({Showed.NOTE: True}, ()),
        ({Showed.NOTE: ""}, ()),
        ({Showed.NOTE: {"x": 1}}, ()),
    ],
)
def test_what_showed_for_real_reads_any_shape_a_report_holds(
    notes: dict[str, Any], expected: tuple[str, ...]
) -> None:
    found = view_of(case("p", "a", notes=notes), Showed)
    assert (found.items if found is not None else ()) == expected


def test_junk_shapes_are_no_view() -> None:
    junk = case(
        "p",
        "a",
        notes={
            StepTable.NOTE: {"steps": [1, {"loss": "x"}]},
            ModelNote.NOTE: {"x": 1},
            DeepSpeedConfigNote.NOTE: [],
            HangSource.NOTE: {"collectives_from": ""},
        },
    )
    assert views_of(junk) == ()


def test_ds_doctor_s_own_families_carry_their_view_by_name() -> None:
    finding = Finding("remapped_rows_pending", Severity.ERROR, "GPU 1: rows pending")
    gpu = case(GpuCheck.FAMILY, "gpu1", Outcome.FAIL, world_size=1, findings=(finding,))
    record = case(NodeRecordCheck.FAMILY, "xid", world_size=1)
    assert view_of(gpu, GpuCheck) == GpuCheck("gpu_health[gpu1-ws1]", (finding,))
    assert view_of(record, NodeRecordCheck) == NodeRecordCheck("xid-ws1", ())
    assert view_of(case("my_gpu_probe", "gpu1", findings=(finding,)), GpuCheck) is None


def test_views_are_registered_once_by_name() -> None:
    assert StepTable in views() and len({kind.__name__ for kind in views()}) == len(views())
    assert register(StepTable) is StepTable  # the same type again: nothing to refuse

    class StepTableTwin:
        @classmethod
        def read(cls, result: CaseResult) -> None:
            return None

    StepTableTwin.__name__ = "StepTable"
    with pytest.raises(ValueError, match="view 'StepTable' is both"):
        register(StepTableTwin)


def test_the_note_keys_are_the_ones_reports_have_always_carried() -> None:
    """The wire contract: a key changed here loses the view of every report written before."""
    keys = [
        kind.NOTE
        for kind in (StepTable, ModelNote, DeepSpeedConfigNote, AccelerateConfigNote, Showed, HangSource)
    ]
    assert keys == ["equivalence", "model", "user_config", "accelerate_config", "showed", "forensics"]
    assert (GpuCheck.FAMILY, NodeRecordCheck.FAMILY) == ("gpu_health", "node_records")

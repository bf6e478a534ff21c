"""The fleet's view (`ds_doctor.fleet.facts`, `ds_doctor.reports.fleet`) over nodes' reports built from
recorded NVML readings:
which node fails, where versions differ from the majority (by the live consistency rules), which measure falls
below the fleet's median, what ranks sharing a GPU measured kept out, hostile strings kept in their cells."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re

import pytest

from ds_doctor.checks.consistency import compare
from ds_doctor.fleet.facts import Source, build_fleet, report_fingerprint
from ds_doctor.reports.fleet import Fleet, NodeView, render_fleet
from ds_doctor.reports.measures import on_shared_gpu
from ds_doctor.reports.model import CaseResult, Outcome, Report
from ds_doctor.reports.prometheus import baseline_ratios
from tests.reports.fleet_samples import COMM, COMPUTE, SICK, T4, comm, node, with_shared_gpu
from tests.reports.hostile import CORPUS, markdown_problems, plant
from tests.reports.samples import NOW

FLEET_HEADINGS = re.compile(
    r"(ds-doctor fleet: .*|Failing cases|Differences across the fleet|Measures against the fleet "
    r"median|Not compared: ranks that shared a GPU|Reports left out|Notes)"
)


def fleet_of(*reports: Report, tolerance_pct: float = 10.0) -> Fleet:
    return build_fleet([Source(f"/state/{i}.json", r) for i, r in enumerate(reports)], [], tolerance_pct)


def row(fleet: Fleet, host: str) -> NodeView:
    (found,) = [n for n in fleet.nodes if n.host == host]
    return found


def test_the_fleet_names_the_failing_node_the_odd_versions_and_the_slow_link() -> None:
    fleet = fleet_of(
        node("node-a"),
        node("node-b", recording=SICK),
        node("node-c", deepspeed="0.16.0"),
        node("node-d", busbw=50.0),
        node("node-e", busbw=95.0),
    )
    assert (
        fleet.failed
        and [n.host for n in fleet.nodes if n.failed] == ["node-b"]
        and fleet.nodes[0].host == "node-b"
    )
    sick = row(fleet, "node-b")
    rules = {rule for case in sick.gpu_health for rule in case.rules}
    assert {"uncorrected_ecc", "remapped_rows_pending", "hw_slowdown"} <= rules and not sick.failing
    # the sick node's driver differs from the other four: an error, as between the ranks of one job
    assert {(d.key, d.value, d.majority, d.severity) for d in sick.deviations} >= {
        ("driver", "550.54.15", "580.159.04", "error"),
        ("cuda_driver", "12.4", "13.0", "error"),
    }
    (deepspeed,) = row(fleet, "node-c").deviations
    assert (deepspeed.key, deepspeed.value, deepspeed.majority, deepspeed.severity) == (
        "package:deepspeed",
        "0.16.0",
        "0.17.6",
        "error",
    )
    slow = {(m.case, m.measure): m for m in row(fleet, "node-d").below}
    assert (
        set(slow) == {(COMM, "busbw_gbps"), (COMM, "algbw_gbps")}
        and slow[(COMM, "busbw_gbps")].delta_pct == -50.0
    )
    assert slow[(COMM, "busbw_gbps")].median == 100.0 and slow[(COMM, "busbw_gbps")].nodes == 5
    assert not row(fleet, "node-e").below  # 5 % below the median: within the tolerance
    assert not row(fleet, "node-a").deviations and not row(fleet, "node-a").below
    text = render_fleet(fleet)
    assert text.startswith("# ds-doctor fleet: **1 of 5 node(s) failing**")
    assert "deepspeed 0.16.0 (fleet 0.17.6)" in text and "busbw 50 GB/s (-50.0% vs 100)" in text
    assert "| node-b | gpu_health[gpu1] | fail |" in text
    assert "| deepspeed | 0.17.6 (4 node(s)) | 0.16.0 on node-c | error |" in text


def test_a_healthy_fleet_does_not_fail_and_a_tolerance_decides_the_flags() -> None:
    reports = (node("node-a"), node("node-b", busbw=92.0), node("node-c", tflops=640.0))
    fleet = fleet_of(*reports)
    assert not fleet.failed and not fleet.spreads and not any(n.below for n in fleet.nodes)
    assert render_fleet(fleet).startswith("# ds-doctor fleet: 3 node(s), none failing")
    strict = fleet_of(*reports, tolerance_pct=5.0)
    assert {(n.host, m.case, m.measure) for n in strict.nodes for m in n.below} == {
        ("node-b", COMM, "busbw_gbps"),
        ("node-b", COMM, "algbw_gbps"),
        ("node-c", COMPUTE, "tflops"),
    }
    assert not strict.failed  # a slow node is flagged, not failed: exit 1 belongs to failing cases


def test_a_failing_case_fails_its_node() -> None:
    broken = comm(80.0, Outcome.TIMEOUT, reason="timed out after 60 s on rank 3")
    fleet = fleet_of(
        node("node-a"), node("node-b", results=(dataclasses.replace(broken, case="comm[broadcast-ws8]"),))
    )
    (failing,) = row(fleet, "node-b").failing
    assert fleet.failed and (failing.case, failing.outcome, failing.reason) == (
        "comm[broadcast-ws8]",
        "timeout",
        "timed out after 60 s on rank 3",
    )


def test_the_fleet_runs_the_consistency_rules_of_a_live_job() -> None:
    """One rule set, two sources: the fleet's differences are exactly what `compare` finds over the same prints."""
    reports = [
        node("node-a"),
        node("node-b", deepspeed="0.16.0", variables={"NCCL_IB_HCA": "mlx5_1"}),
        node("node-c", recording=T4),
        node("node-d", variables={"SLURM_JOB_ID": "77", "MASTER_PORT": "1"}),
    ]
    fleet = fleet_of(*reports)
    live = compare([report_fingerprint(r) for r in sorted(reports, key=lambda r: r.hardware.host)])
    assert [(s.key, s.severity) for s in fleet.spreads] == [
        (f.expected.split(" = ")[0], f.severity.value) for f in live
    ]
    keys = {s.key for s in fleet.spreads}
    assert {"package:deepspeed", "env:NCCL_IB_HCA", "gpu.name", "driver"} <= keys
    assert not {k for k in keys if k.startswith(("env:SLURM_", "env:MASTER_"))}  # a run's own, not the node's


def test_a_report_is_fingerprinted_as_a_live_rank_is() -> None:
    """A report of this machine (its environment collected as `run` collects it) and this machine's live fingerprint
    agree on every key both have: the fleet compares what `consistency` compares."""
    from ds_doctor.collect.fingerprint import fingerprint
    from ds_doctor.hardware.env import collect_environment
    from ds_doctor.run.build import build_report

    env, hardware = collect_environment()
    report = build_report(
        started=NOW, finished=NOW, level=1, argv=(), env=env, hardware=hardware, results=[], run_dir=None
    )
    ours, live = report_fingerprint(report), fingerprint(0, None, "cpu")
    shared = set(ours) & set(live)
    assert {"python", "torch.cuda", "package:torch", "package:deepspeed"} <= shared
    assert {k: ours[k] for k in shared} == {k: live[k] for k in shared}
    assert set(ours) - set(live) <= {"gpu.count"} | {
        k for k in ours if k.startswith(("gpu.", "driver", "cuda_driver"))
    }


def test_the_newest_report_of_a_host_wins_and_says_so() -> None:
    old = node("node-a", recording=SICK, started=NOW - dt.timedelta(days=1))
    new, older = node("node-a"), node("node-a", busbw=10.0, started=NOW - dt.timedelta(days=2))
    fleet = build_fleet(
        [
            Source("/s/old.json", old),
            Source("/s/new.json", new),
            Source("/s/older.json", older),
            Source("/s/b.json", node("node-b")),
        ],
        [],
        10.0,
    )
    a = row(fleet, "node-a")
    assert not fleet.failed and a.source == "/s/new.json" and a.superseded == ("/s/old.json", "/s/older.json")
    assert len(fleet.nodes) == 2 and not a.below
    assert "node-a: newest of 3 reports of this host; older: /s/old.json, /s/older.json" in render_fleet(
        fleet
    )


def test_anonymized_reports_are_rows_of_their_own() -> None:
    """`--anonymize` names every node `host-1`: such reports cannot be told apart by host, so none replaces another."""
    argv = ("run", "--anonymize")
    fleet = fleet_of(node("host-1", argv=argv), node("host-1", argv=argv, recording=SICK))
    assert len(fleet.nodes) == 2 and [n.failed for n in fleet.nodes] == [True, False]
    assert all("anonymized" in n.notes[0] for n in fleet.nodes)


def two_node_run(a: Report, b: Report, across: CaseResult) -> Report:
    """The one report `run --nnodes 2` writes, from each node's own report: its results stamped with its node, its
    env and hardware as its node section, and a case across the nodes (node None)."""
    stamped = [dataclasses.replace(r, node=n) for n, part in enumerate((a, b)) for r in part.results]
    sections = tuple(
        {
            "node": n,
            "host": part.hardware.host,
            "env": part.env.to_dict(),
            "hardware": part.hardware.to_dict(),
        }
        for n, part in enumerate((a, b))
    )
    return dataclasses.replace(a, results=(*stamped, across), nodes=sections)


def test_each_node_of_a_multi_node_run_is_a_row_of_its_own() -> None:
    """node 1's versions and GPUs are compared with the fleet as a node of its own; a failing case across the nodes
    shows in both rows, and its bandwidth (the fabric's) is compared nowhere."""
    across = dataclasses.replace(
        comm(5.0, Outcome.FAIL, reason="ranks disagree"), case="comm[all_reduce-ws16-n2]", nodes=2
    )
    run = two_node_run(node("node-a"), node("node-b", deepspeed="0.16.0", recording=SICK), across)
    fleet = fleet_of(run, node("node-c"), node("node-d"))
    assert sorted(n.host for n in fleet.nodes) == ["node-a", "node-b", "node-c", "node-d"]
    a, b = row(fleet, "node-a"), row(fleet, "node-b")
    assert a.source == "/state/0.json (node 0 of 2)" and b.source == "/state/0.json (node 1 of 2)"
    assert [d.key for d in b.deviations if d.key == "package:deepspeed"] and not a.deviations
    assert b.gpu_health and not a.gpu_health  # node 1's own health cases, in its own row
    assert [c.case for c in a.failing] == [c.case for c in b.failing] == ["comm[all_reduce-ws16-n2]"]
    assert not [m for n in fleet.nodes for m in n.measures if m.case == "comm[all_reduce-ws16-n2]"]
    assert {m.nodes for n in fleet.nodes for m in n.measures if m.case == COMM} == {4}
    assert "one node of a 2-node run" in a.notes[0]
    same_host = two_node_run(node("node-a"), node("node-a"), across)  # two "nodes" on one host: one row
    (only,) = fleet_of(same_host).nodes
    assert (
        only.source == "/state/0.json"
        and "2-node run (node-a, node-a): every node's cases in this one row" in only.notes[0]
    )


def test_what_ranks_sharing_a_gpu_measured_never_meets_the_median() -> None:
    shared = with_shared_gpu(comm(3.0))
    lone = node("node-d", busbw=1.0)
    lone = dataclasses.replace(lone, results=tuple(shared if r.key == COMM else r for r in lone.results))
    assert on_shared_gpu(next(r for r in lone.results if r.key == COMM))
    fleet = fleet_of(node("node-a"), node("node-b", busbw=90.0), node("node-c", busbw=80.0), lone)
    d = row(fleet, "node-d")
    assert d.shared_gpu == (COMM,) and not d.below and {m.case for m in d.measures} == {COMPUTE}
    busbw = [m for n in fleet.nodes for m in n.measures if m.measure == "busbw_gbps"]
    assert len(busbw) == 3 and {m.median for m in busbw} == {90.0}  # the median of the three real links
    assert "## Not compared: ranks that shared a GPU" in render_fleet(fleet)
    # ...nor is it a ratio to the node's baseline in the Prometheus export
    assert not [r for r in baseline_ratios(lone, node("node-d")) if r[1] == COMM]
    assert [r for r in baseline_ratios(node("node-d", busbw=50.0), node("node-d")) if r[1] == COMM]


def test_a_shared_gpu_result_is_recognised_as_a_record_and_as_a_dict() -> None:
    result, shared = comm(1.0), with_shared_gpu(comm(1.0))
    assert (
        on_shared_gpu(shared)
        and on_shared_gpu(shared.to_dict())
        and on_shared_gpu(CaseResult.from_dict(shared.to_dict()))
    )
    assert not on_shared_gpu(result) and not on_shared_gpu(result.to_dict())


def test_measures_are_compared_among_nodes_with_the_same_gpus() -> None:
    """A T4 node is no slow H100 node; two T4s are compared with each other."""
    h100s = [node(f"h100-{i}") for i in range(3)]
    one = fleet_of(*h100s, node("t4-a", recording=T4, busbw=10.0, tflops=60.0))
    assert not any(n.below for n in one.nodes)
    two = fleet_of(
        *h100s,
        node("t4-a", recording=T4, busbw=10.0, tflops=60.0),
        node("t4-b", recording=T4, busbw=20.0, tflops=60.0),
    )
    (low,) = [m for m in row(two, "t4-a").below if m.measure == "busbw_gbps"]
    assert (low.gpus, low.median, round(low.delta_pct or 0, 1)) == ("Tesla T4", 15.0, -33.3)


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_hostile_strings_stay_in_their_cells(name: str) -> None:
    """Host names, case ids, reasons, versions and variables from other machines' reports keep the Markdown's
    structure (the checks of the report's own Markdown), and the JSON is JSON."""
    text = CORPUS[name]
    reports = [
        Report.from_dict(plant(r.to_dict(), text))
        for r in (
            node("node-a", recording=SICK, results=(comm(5.0, Outcome.FAIL, reason="bad"),)),
            node("node-b"),
            node("node-c", deepspeed="0.1"),
        )
    ]
    fleet = fleet_of(*reports)
    markdown = render_fleet(fleet)
    problems = [
        p
        for p in markdown_problems(markdown)
        if not (
            p.startswith("a heading the report did not write")
            and FLEET_HEADINGS.match(p.split(": ", 1)[1][1:])
        )
    ]
    assert problems == [], problems
    assert json.loads(json.dumps(fleet.to_dict()))["failed"] is True
    # cells are cut, the long string is not pasted
    assert max(len(line) for line in markdown.splitlines()) < 20_000

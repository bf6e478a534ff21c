"""Ranks that share a GPU (more ranks than GPUs on a node): planned instead of skipped, launched with the per-rank
way of sharing, labelled on every result, and what they measure between them never a node's figure. The CUDA side
runs on a GPU node (docs/gpu/); this is everything a CPU machine can hold to account."""

from __future__ import annotations

from pathlib import Path

from ds_doctor.checks.baseline import measure_changes
from ds_doctor.probe import registry
from ds_doctor.reports.console import case_line
from ds_doctor.reports.markdown import render_markdown
from ds_doctor.reports.model import CaseResult, Outcome, validate
from ds_doctor.reports.prometheus import render_prometheus
from ds_doctor.run.command import torchrun_command
from ds_doctor.run.merge import merge_case
from ds_doctor.run.pipeline import RunOptions, make_plan
from ds_doctor.run.plan import Hardware, node_world_size, plan, select_cases, shared_gpu_mode
from ds_doctor.run.worker import gpu_environment
from ds_doctor.rundir import PlannedCase, RankLine
from tests.reports.samples import a_report, case

SHARED = "2 ranks on 1 GPU(s): nccl, a distinct NCCL_HOSTID per rank"


def test_a_case_wider_than_the_node_shares_its_gpu_instead_of_skipping() -> None:
    run_plan = make_plan(RunOptions(level=3, keyword="zero_offload and z3"), Hardware("cuda", 1))
    assert run_plan.skips == () and run_plan.nproc == 2
    assert {(g.world_size, g.backend, g.shared_gpu) for g in run_plan.groups} == {
        (1, "nccl", None),
        (2, "nccl", SHARED),
    }
    assert {p.case: p.shared_gpu for p in run_plan.planned if p.world_size == 2} and all(
        (p.shared_gpu == SHARED) == (p.world_size == 2) for p in run_plan.planned
    )
    # the manifest keeps it
    assert PlannedCase.from_dict(run_plan.planned[-1].to_dict()) == run_plan.planned[-1]
    wide = make_plan(RunOptions(level=3, keyword="zero_offload and z3"), Hardware("cuda", 8))
    assert {g.shared_gpu for g in wide.groups} == {None}  # enough GPUs: nothing shared
    asked = make_plan(RunOptions(level=3, keyword="zero_offload and z3", nproc=1), Hardware("cuda", 1))
    # --nproc 1 is heard
    assert len(asked.skips) == 6 and all("needs 2 ranks" in s.skip_reason for s in asked.skips)
    assert node_world_size(Hardware("cuda", 1)) == 1  # the hardware families measure the node as it is


def test_the_launch_says_how_ranks_share(tmp_path: Path) -> None:
    cases = select_cases(registry.all_cases(), level=3, keyword="zero_offload and z3 and ws2")
    for mode, backend in (("nccl-hostid", "nccl"), ("gloo", "gloo")):
        # the parent reads it once, into the options
        assert shared_gpu_mode({"DS_DOCTOR_SHARED_GPU": mode}) == mode
        (group,), _ = plan(cases, Hardware("cuda", 1), nproc=2, share_mode=mode)
        command = torchrun_command(group, tmp_path)
        at = command.index("--backend")
        assert command[at : at + 4] == ["--backend", backend, "--shared-gpu", mode], command
        assert group.shared_gpu and mode.split("-")[0] in group.shared_gpu
    (group,), _ = plan(cases, Hardware("cpu", 0), nproc=2)
    assert "--shared-gpu" not in torchrun_command(group, tmp_path)  # CPU ranks share nothing


def shared_case(busbw: float, shared: str | None = SHARED) -> CaseResult:
    return case(
        Outcome.PASS,
        "all_reduce",
        probe="comm",
        world_size=2,
        measures={"busbw_gbps": busbw},
        shared_gpu=shared,
    )


def test_a_shared_result_is_labelled_and_never_the_nodes_bandwidth() -> None:
    report = a_report([shared_case(900.0)])
    data = report.to_dict()
    validate(data)
    assert (
        data["results"][0]["shared_gpu"] == SHARED
        and type(report).from_dict(data).results[0].shared_gpu == SHARED
    )
    assert case_line(report.results[0]).startswith(
        f"{report.results[0].key} PASS 0.2s [shared GPU: {SHARED}]"
    )
    markdown = render_markdown(report)
    assert "cpu (shared GPU)" in markdown and "its ranks shared a GPU" in markdown and "900" not in markdown
    assert "busbw" not in render_prometheus(report)  # no gauge: the one bandwidth here is no node's
    assert "busbw_gbps" in render_prometheus(a_report([shared_case(900.0, None)]))
    before, after = shared_case(900.0, None), shared_case(9.0)
    # a 99 % drop that is no drop
    assert measure_changes({before.key: before}, {after.key: after}, 10.0) == []
    plain = shared_case(9.0, None)
    assert len(measure_changes({before.key: before}, {plain.key: plain}, 10.0)) == 1


def test_merge_carries_the_planned_sharing() -> None:
    planned = PlannedCase(
        case="comm[all_reduce-ws2]",
        probe="comm",
        scenario="smoke",
        variant="all_reduce",
        world_size=2,
        level=2,
        reproduce=False,
        device_kind="cuda",
        shared_gpu=SHARED,
    )
    lines = [
        RankLine(case=planned.case, rank=r, world_size=2, outcome=Outcome.PASS, duration_s=1.0)
        for r in (0, 1)
    ]
    assert merge_case(planned, lines, {}).shared_gpu == SHARED


def test_a_rank_sharing_a_gpu_names_that_gpu_as_its_local_rank() -> None:
    """DeepSpeed, Accelerate and the Trainer take their GPU from LOCAL_RANK: on a one-GPU H100, rank 1 of a shared
    launch raised "invalid device ordinal" until LOCAL_RANK named the GPU it shares (docs/gpu-runs.md, 2026-11-26)."""
    environ = {"RANK": "1", "LOCAL_RANK": "1"}
    assert gpu_environment(1, 1, "nccl-hostid", environ) == {
        "LOCAL_RANK": "0",
        "NCCL_HOSTID": "ds-doctor-rank1",
    }
    assert gpu_environment(3, 2, "gloo", environ) == {"LOCAL_RANK": "1"}
    # a rank with a GPU of its own keeps its local rank and NCCL's own idea of its host
    assert gpu_environment(1, 8, None, environ) == {}
    assert gpu_environment(0, 1, "nccl-hostid", {"RANK": "0"}) == {"NCCL_HOSTID": "ds-doctor-rank0"}

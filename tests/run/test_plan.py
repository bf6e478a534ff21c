"""Selection (-k, level), requirement checks and grouping into launches."""

from __future__ import annotations

import pytest

from doctor.plugins import ProbeSpec, Requirement
from doctor.run import registry
from doctor.run.pipeline import RunOptions, make_plan
from doctor.run.plan import Hardware, KeywordError, compile_keyword, missing_requirements, plan, select_cases


@pytest.mark.parametrize(
    ("expr", "name", "expected"),
    [
        ("z3", "zero_offload[z3-opt-bf16-ws2]", True),
        ("Z3 and BF16", "zero_offload[z3-opt-bf16-ws2]", True),
        ("z3 and not bf16", "zero_offload[z3-opt-bf16-ws2]", False),
        ("z1 or (z3 and ws2)", "zero_offload[z3-opt-bf16-ws2]", True),
        ("not (z1 or z2)", "zero_offload[z2-opt-bf16-ws1]", False),
        ("opt+param", "zero_offload[z3-opt+param-bf16-ws1]", True),
    ],
)
def test_keyword_expressions(expr, name, expected) -> None:
    assert compile_keyword(expr)(name) is expected


@pytest.mark.parametrize("expr", ["", "(z3", "z3 and", "and z3", "z3 )", "not"])
def test_bad_keyword_expressions_raise(expr) -> None:
    with pytest.raises(KeywordError):
        compile_keyword(expr)


def test_levels() -> None:
    cases = registry.all_cases()
    # level 1 selects only the consistency check (the pipeline runs it only across nodes: one node plans nothing)
    assert [c.id for c in select_cases(cases, level=1, keyword=None)] == ["consistency[fingerprint-ws2]"]
    level2 = select_cases(cases, level=2, keyword=None)
    assert {(c.probe, c.variant) for c in level2} == {("consistency", "fingerprint"),
        ("zero_offload", "z3-opt+param-bf16"), ("frozen_param_names", "z2-healthy"),
        ("frozen_param_names", "z2-dispatch-disk"), ("accelerate_deepspeed_lifecycle", "z2-healthy"),
        ("optimizer_coverage", "fsdp2"), ("optimizer_coverage", "deepspeed-z2"),
        ("optimizer_state_placement", "prodigy-plus-schedule-free"),
        *(("comm", name) for name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")),
        *(("compute", name) for name in ("matmul-bf16", "matmul-fp16", "matmul-fp32", "memory"))}
    assert {c.world_size for c in level2} == {1, 2}
    assert len(select_cases(cases, level=3, keyword="zero_offload")) == 28


def test_hardware_families_scale_to_the_node() -> None:
    """comm and compute also run at the node's world size (all 8 GPUs); the others keep their own."""
    cases = registry.all_cases(8)
    sizes = {probe: sorted({c.world_size for c in cases if c.probe == probe}) for probe in ("comm", "compute", "zero_offload")}
    assert sizes == {"comm": [1, 2, 8], "compute": [1, 8], "zero_offload": [1, 2]}
    assert registry.all_cases(1) == registry.all_cases()  # already declared: nothing added
    assert [c.id for c in registry.all_cases(2) if c not in registry.all_cases()] == [
        f"compute[{name}-ws2]" for name in ("matmul-bf16", "matmul-fp16", "matmul-fp32", "memory")]
    # a worker finds a node-scaled case from the world size in its id
    assert registry.find_case("comm[all_gather-ws8]").world_size == 8
    with pytest.raises(KeyError):
        registry.find_case("zero_offload[z1-none-bf16-ws8]")
    run_plan = make_plan(RunOptions(level=2, keyword="compute"), Hardware("cuda", 4))
    assert sorted({c.world_size for c in run_plan.planned}) == [1, 4] and run_plan.skips == ()
    run_plan = make_plan(RunOptions(level=2, keyword="compute", nproc=4), Hardware("cpu", 0))
    assert sorted({c.world_size for c in run_plan.planned}) == [1]  # a CPU node has no GPUs to cover


def test_cases_are_grouped_by_world_size_and_too_large_ones_skip() -> None:
    cases = select_cases(registry.all_cases(), level=3, keyword="zero_offload and z3")
    groups, skips = plan(cases, Hardware("cpu", 0), nproc=2)
    assert [(g.world_size, g.backend, len(g.cases)) for g in groups] == [(1, "gloo", 6), (2, "gloo", 6)]
    assert skips == []
    groups, skips = plan(cases, Hardware("cuda", 1), nproc=1)
    assert [(g.world_size, g.backend) for g in groups] == [(1, "nccl")]
    assert len(skips) == 6 and all("needs 2 ranks" in s.reason for s in skips)


def test_a_missing_optional_package_gives_its_install_line() -> None:
    spec = ProbeSpec(name="x", scenario="smoke", description="", requires=(Requirement("no_such_pkg_ds_doctor", "nspd"),))
    assert missing_requirements(spec) == ["pip install nspd"]

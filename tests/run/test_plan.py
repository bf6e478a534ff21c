"""Selection (-k, level), requirement checks and grouping into launches."""

from __future__ import annotations

import pytest

from ds_doctor.plugins import ProbeSpec, Requirement
from ds_doctor.probe import registry
from ds_doctor.run.pipeline import RunOptions, make_plan
from ds_doctor.run.plan import (
    MAX_KEYWORD_CHARS,
    MAX_KEYWORD_DEPTH,
    Hardware,
    KeywordError,
    compile_keyword,
    missing_requirements,
    plan,
    select_cases,
)

CASE = "zero_offload[z3-opt-bf16-ws2]"


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


# a long flat chain near the length bound
@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("\u00e9t\u00e9", False),  # non-ASCII: a substring like any other
        ("Z3-OPT", True),
        ("\x00", False),  # NUL: a substring no case id holds
        ("z3\tand\nbf16", True),  # any whitespace separates
        ("(z3)and(bf16)", True),  # parentheses need no spaces
        ("not not z3", True),
        ("not " * MAX_KEYWORD_DEPTH + "z3", True),  # exactly at the depth bound: still parses
        ("(" * MAX_KEYWORD_DEPTH + "z3" + ")" * MAX_KEYWORD_DEPTH, True),
        (" or ".join(["zz"] * ((MAX_KEYWORD_CHARS - 2) // 6) + ["z3"]), True),
        (" and ".join(["z3"] * ((MAX_KEYWORD_CHARS - 2) // 7) + ["zz"]), False),
    ],
)
def test_unusual_keyword_expressions_select_correctly(expr: str, expected: bool) -> None:
    assert len(expr) <= MAX_KEYWORD_CHARS
    assert compile_keyword(expr)(CASE) is expected


@pytest.mark.parametrize(
    "expr",
    [
        "",
        "   ",
        "\t\n",
        "()",
        "((z3)",
        "(z3))",
        ")(",
        "z3 and and bf16",
        "z3 or",
        "or or",
        "not not",
        "z3 bf16",
        "(" * 5000 + "z3" + ")" * 5000,  # once a RecursionError
        "(" * (MAX_KEYWORD_DEPTH + 1) + "z3" + ")" * (MAX_KEYWORD_DEPTH + 1),
        "not " * (MAX_KEYWORD_DEPTH + 1) + "z3",
        "not (" * 40 + "z3" + ")" * 40,  # parentheses and `not` count together
        " or ".join(["a"] * 25_000),  # 100k characters
        "z3" * (MAX_KEYWORD_CHARS // 2 + 1),
    ],
)
def test_hostile_keyword_expressions_raise_keyword_error_only(expr: str) -> None:
    """The CLI turns a KeywordError into one line and exit 2; any other exception would be the doctor's own bug."""
    with pytest.raises(KeywordError):
        compile_keyword(expr)


def test_the_keyword_bounds_are_named_in_the_error() -> None:
    with pytest.raises(KeywordError, match=f"the limit is {MAX_KEYWORD_CHARS}$"):
        compile_keyword("a" * (MAX_KEYWORD_CHARS + 1))
    with pytest.raises(KeywordError, match=f"deeper than {MAX_KEYWORD_DEPTH} levels"):
        compile_keyword("(" * (MAX_KEYWORD_DEPTH + 1) + "z3" + ")" * (MAX_KEYWORD_DEPTH + 1))
    long = "a" * 100_000
    with pytest.raises(KeywordError) as refused:
        compile_keyword(long)
    # one short line, not the input echoed
    assert long not in str(refused.value) and "\n" not in str(refused.value)


def test_levels() -> None:
    cases = registry.all_cases()
    # level 1 selects only the consistency check (the pipeline runs it only across nodes: one node plans nothing)
    assert [c.id for c in select_cases(cases, level=1, keyword=None)] == ["consistency[fingerprint-ws2]"]
    level2 = select_cases(cases, level=2, keyword=None)
    assert {(c.probe, c.variant) for c in level2} == {
        ("consistency", "fingerprint"),
        ("zero_offload", "z3-opt+param-bf16"),
        ("frozen_param_names", "z2-healthy"),
        ("frozen_param_names", "z2-dispatch-disk"),
        ("accelerate_deepspeed_lifecycle", "z2-healthy"),
        ("optimizer_coverage", "fsdp2"),
        ("optimizer_coverage", "deepspeed-z2"),
        ("optimizer_state_placement", "prodigy-plus-schedule-free"),
        *(("equivalence", name) for name in ("ddp", "fsdp2", "deepspeed-z2", "deepspeed-z3")),
        # the knob matrix's slice: each of four routes' most-turned setting
        ("equivalence", "matrix-ddp-ga1-noclip-decay-warmup-adam"),
        (
            "equivalence",
            "matrix-deepspeed-z2-bf16-noclip-decay-warmup-offload-client-adam-accumulate-fp32-resume",
        ),
        (
            "equivalence",
            "matrix-deepspeed-z3-bf16-ga1-noclip-decay-warmup-offload-client-adam-accumulate-fp32-resume",
        ),
        (
            "equivalence",
            "matrix-accelerate-bf16-ga4-noclip-rates-warmup-adam-sync-each-batch-shuffle-rank-seeds",
        ),
        *(("comm", name) for name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall")),
        *(
            ("comm", f"{name}-bf16")
            for name in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall")
        ),
        *(("compute", name) for name in ("matmul-bf16", "matmul-fp16", "matmul-fp32", "memory")),
    }
    assert {c.world_size for c in level2} == {1, 2}
    assert len(select_cases(cases, level=3, keyword="zero_offload")) == 28


def test_hardware_families_scale_to_the_node() -> None:
    """comm and compute also run at the node's world size (all 8 GPUs); the others keep their own."""
    cases = registry.all_cases(8)
    sizes = {
        probe: sorted({c.world_size for c in cases if c.probe == probe})
        for probe in ("comm", "compute", "zero_offload")
    }
    assert sizes == {"comm": [1, 2, 8], "compute": [1, 8], "zero_offload": [1, 2]}
    assert registry.all_cases(1) == registry.all_cases()  # already declared: nothing added
    assert [c.id for c in registry.all_cases(2) if c not in registry.all_cases()] == [
        f"compute[{name}-ws2]" for name in ("matmul-bf16", "matmul-fp16", "matmul-fp32", "memory")
    ]
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
    spec = ProbeSpec(
        name="x", scenario="smoke", description="", requires=(Requirement("no_such_pkg_ds_doctor", "nspd"),)
    )
    assert missing_requirements(spec) == ["pip install nspd"]

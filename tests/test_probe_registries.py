"""What a probe declares beyond its spec, as the plugin API offers it: measures and scenarios in registries seeded
with the built-in ones (a probe adds its own, and the reports read units and directions from there), the `Wrapper`
names, the requirement constants, `ctx.add_findings` (and `ctx.check`, deprecated), and `ds_doctor.plugins.process`
as functions of its own."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ds_doctor import plugins
from ds_doctor.plugins import process, requirements
from ds_doctor.probe import registry
from ds_doctor.probe.spec import registered_scenarios
from ds_doctor.reports.markdown import render_measurements
from ds_doctor.reports.measures import format_measure, registered_measures
from ds_doctor.reports.model import Finding, Outcome, Severity
from ds_doctor.reports.prometheus import baseline_ratios
from tests.reports.samples import a_report, case

BUILT_IN_MEASURES = [
    "node_a",
    "node_b",
    "bytes",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "matmul_size",
    "relative_error",
    "error_tolerance",
    "tflops",
]
STEP_MS = plugins.Measure("step_ms", "step", "ms", "time of one optimizer step", better="lower", min_ranks=2)
S5 = plugins.Scenario("S5", "a toy class of failure")


def a_context(rank: int = 0) -> plugins.ProbeContext:
    return plugins.ProbeContext(
        case_id="toy[a-ws1]", params=None, rank=rank, world_size=1, local_rank=0, device="cpu", backend="gloo"
    )


def test_the_registries_are_seeded_with_the_built_in_lists() -> None:
    assert list(plugins.MEASURES) == BUILT_IN_MEASURES
    assert list(plugins.SCENARIOS) == ["S0", "S1", "S2", "S3", "S4", "smoke"]
    assert all(s.description for s in plugins.SCENARIOS.values())
    with pytest.raises(TypeError):
        plugins.MEASURES["x"] = STEP_MS  # type: ignore[index]  # read-only: register_measure adds


def test_a_registered_measure_is_read_by_the_context_and_the_reports() -> None:
    with registered_measures(STEP_MS):
        assert list(plugins.MEASURES)[-1] == "step_ms" and plugins.MEASURES["step_ms"] is STEP_MS
        ctx = a_context()
        ctx.measure("step_ms", 12.5)
        assert ctx.measures == {"step_ms": 12.5}
        assert format_measure("step_ms", 12.5, 2) == "step 12.5 ms"
        assert format_measure("step_ms", 12.5, 1) == "step — (not measured)"
        before = case(Outcome.PASS, "toy", probe="toy", world_size=2, measures={"step_ms": 10.0})
        after = dataclasses.replace(before, measures={"step_ms": 20.0})
        lines = render_measurements(a_report([after]))
        assert any("step (ms)" in line for line in lines) and any("20" in line for line in lines)
        # lower is better: twice the time is half as good
        assert baseline_ratios(a_report([after]), a_report([before])) == [
            ("toy", "toy[toy-ws2]", "step_ms", 0.5)
        ]
    assert "step_ms" not in plugins.MEASURES  # the block's registration is undone
    with pytest.raises(KeyError, match=r"unknown measure 'step_ms'.*register_measure"):
        a_context().measure("step_ms", 1.0)


def test_a_measure_name_is_one_measure() -> None:
    with registered_measures(STEP_MS):
        assert plugins.register_measure(STEP_MS) is STEP_MS  # a module imported twice
        with pytest.raises(ValueError, match="'step_ms' is already registered as Measure"):
            plugins.register_measure(dataclasses.replace(STEP_MS, unit="s"))
        with pytest.raises(ValueError, match="'tflops' is already registered"):
            plugins.register_measure(dataclasses.replace(STEP_MS, name="tflops"))
    with pytest.raises(ValueError, match="better is 'higher', 'lower' or None"):
        plugins.Measure("x", "x", "", "x", better="faster")


def test_a_spec_names_a_registered_scenario() -> None:
    with pytest.raises(ValueError, match=r"scenario 'S5' is not registered \(known: S0, .*register_scenario"):
        plugins.ProbeSpec(name="toy", scenario="S5", description="")
    with registered_scenarios(S5):
        assert plugins.ProbeSpec(name="toy", scenario="S5", description="").scenario == "S5"
        assert plugins.register_scenario(S5) is S5
        with pytest.raises(ValueError, match="'S5' is already registered"):
            plugins.register_scenario(plugins.Scenario("S5", "another"))
    assert "S5" not in plugins.SCENARIOS


def test_a_probe_whose_declarations_are_refused_does_not_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "unknown_scenario_probe.py").write_text(
        "from ds_doctor.plugins import ProbeSpec\n"
        "SPEC = ProbeSpec(name='unknown_scenario', scenario='S9', description='')\n"
        "def variants():\n    return []\n"
        "def run(ctx):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(registry.EXTRA_ENV, "unknown_scenario_probe")
    with pytest.raises(
        registry.RegistryError, match=r"unknown_scenario_probe.*does not load: ValueError.*'S9'"
    ):
        registry.load_modules()


def test_wrapper_names_what_reports_print() -> None:
    assert str(plugins.Wrapper.ACCELERATE_DEEPSPEED) == "accelerate-deepspeed"
    assert f"the {plugins.Wrapper.FSDP2} route" == "the fsdp2 route"
    assert plugins.Wrapper("trainer") is plugins.Wrapper.TRAINER
    assert {w for w in plugins.Wrapper if w.zero} == {
        plugins.Wrapper.DEEPSPEED,
        plugins.Wrapper.ACCELERATE_DEEPSPEED,
    }


def test_the_requirements_are_declared_once() -> None:
    assert requirements.DEEPSPEED == plugins.Requirement("deepspeed", "deepspeed")
    assert requirements.PRODIGY_PLUS.install_line == "pip install prodigy-plus-schedule-free"
    assert requirements.COMPOSER.install_line == "pip install mosaicml"
    declared = [getattr(requirements, name) for name in requirements.__all__]
    assert all(isinstance(r, plugins.Requirement) for r in declared)
    assert len({r.module for r in declared}) == len(declared)


def test_add_findings_stamps_the_rank_and_check_is_a_deprecated_alias() -> None:
    ctx = a_context(rank=1)
    ctx.add_findings([Finding("x", Severity.ERROR, "broke")])
    assert [f.rank for f in ctx.findings] == [1] and ctx.has_error_findings
    with pytest.warns(DeprecationWarning, match=r"ctx.add_findings\(findings\)"):
        ctx.check([Finding("y", Severity.INFO, "noted", rank=0)])
    assert [(f.invariant, f.rank) for f in ctx.findings] == [("x", 1), ("y", 0)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ctx.add_findings([])  # the new name never warns


def test_the_process_api_is_functions_of_its_own() -> None:
    assert sorted(process.__all__) == ["command", "end_with_parent", "find_case", "load_deepspeed_ops"]
    for name in process.__all__:
        function = getattr(process, name)
        assert function.__module__ == "ds_doctor.plugins.process" and function.__doc__, name
    out = subprocess.run(
        [*process.command("platform"), "--terse"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.strip()
    process.end_with_parent()  # in the test process: harmless, and it returns
    wanted = "frozen_param_names[z2-set-tensor-ws1]"
    found = process.find_case(wanted, plugins.RankOptions())
    assert found.id == wanted and found.params is not None
    with pytest.raises(KeyError, match="unknown case"):
        process.find_case("nope[x-ws1]", plugins.RankOptions())
    assert sys.executable in process.command("x")

"""A toy family, `ddp_step`, added by its own files only: docs/writing-probes.md's "A new family" blocks written into
a temporary folder, held to the family contract, and run through the real runner (`ds-doctor run -k`, registered
with DS_DOCTOR_EXTRA_PROBES like any plugin). Its measure (`step_ms`) and its scenario (`S5`) are declared in its
own `probe.py`: the case runs at the new scenario, and the report's JSON and Markdown carry the new measure with
its unit, read from the registry."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ds_doctor import plugins
from ds_doctor.probe import registry
from ds_doctor.probe.spec import registered_scenarios
from ds_doctor.reports.measures import registered_measures
from tests.test_family_layout import file_violations, import_violations, source_violations

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "writing-probes.md"
FAMILY = "ddp_step"


def guide_files() -> dict[str, str]:
    """The guide's blocks that open with `# ddp_step/<file>.py`, by file name."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    return {
        match.group(1): block
        for block in blocks
        if (match := re.match(rf"# {FAMILY}/(\w+\.py)\n", block)) is not None
    }


@pytest.fixture
def family(tmp_path: Path) -> Path:
    """The guide's family, written into a folder of its own (the folder is what goes on the path)."""
    files = guide_files()
    assert sorted(files) == ["__init__.py", "cases.py", "probe.py"]
    package = tmp_path / "site" / FAMILY
    package.mkdir(parents=True)
    for name, text in files.items():
        (package / name).write_text(text)
    return package


def test_the_guide_s_measure_and_scenario_are_the_family_s_own_lines() -> None:
    guide = GUIDE.read_text()
    probe = guide_files()["probe.py"]
    measure = re.search(r"## A new measure\n.*?```python\n(.*?)```", guide, re.S)
    scenario = re.search(r"## A new scenario\n.*?```python\n(.*?)```", guide, re.S)
    assert measure and scenario
    assert measure.group(1) in probe and "register_measure(" in measure.group(1)
    assert scenario.group(1) in probe and "register_scenario(" in scenario.group(1)


def test_the_toy_family_keeps_the_contract(family: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert file_violations(family) == []
    assert source_violations(family.parent) == []
    monkeypatch.syspath_prepend(str(family.parent))
    # imported inside blocks that undo what it registers: the other tests see the built-in registries
    with registered_measures(), registered_scenarios():
        try:
            assert import_violations(FAMILY) == []
            probe = sys.modules[f"{FAMILY}.probe"]
            assert plugins.MEASURES["step_ms"].unit == "ms" and plugins.MEASURES["step_ms"].better == "lower"
            assert probe.SPEC.scenario == "S5" and "S5" in plugins.SCENARIOS
            assert [c.id for c in registry.cases_of(probe)] == [
                "ddp_step[ddp-16-ws1]",
                "ddp_step[ddp-16-ws2]",
            ]
        finally:
            for name in [m for m in sys.modules if m == FAMILY or m.startswith(f"{FAMILY}.")]:
                del sys.modules[name]
    assert "step_ms" not in plugins.MEASURES and "S5" not in plugins.SCENARIOS


@pytest.mark.multirank
def test_the_toy_family_runs_through_the_runner_with_its_measure_and_scenario(
    family: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k != registry.EXTRA_ENV}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(family.parent)]))
    env[registry.EXTRA_ENV] = f"{FAMILY}.probe"
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ds_doctor.cli",
            "run",
            "-k",
            f"{FAMILY} and ws1",
            "--out",
            str(out),
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    (result,) = json.loads(proc.stdout)["results"]
    assert (result["case"], result["scenario"], result["outcome"]) == ("ddp_step[ddp-16-ws1]", "S5", "pass")
    assert result["findings"] == [] and result["measures"]["step_ms"] > 0
    (markdown,) = out.rglob("*.md")
    assert "step (ms)" in markdown.read_text()  # the Markdown read the unit from the registry

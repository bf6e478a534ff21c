"""The README's quick start against a real level-2 run (issue 45: it said 35 cases and 33 passes while a level-2 run
planned 47): the case count, the outcome counts, the traps line and the report paths it shows are what `ds-doctor
run` prints now. The same run is a healthy one, read as a maintainer reads its report: nothing in it is a warning
about ds-doctor's own work (its configs, its set-up, a collective at one rank)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ds_doctor.checks import collectives
from ds_doctor.reports.model import validate

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
pytestmark = pytest.mark.multirank

#: a report's UTC time in its file names (`ds-doctor-<host>-<time>.json`)
STAMP = re.compile(r"\d{8}T\d{6}Z")


def quick_start_output() -> list[str]:
    """The lines of the quick start's "A healthy run ends like this" block."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"A healthy run ends like this[^\n]*:\n\n```\n(.*?)\n```", text, re.S)
    assert block, "the README's quick start has no healthy run's output"
    return block.group(1).splitlines()


def outcome_counts(summary: str) -> dict[str, int]:
    """`vm: 0 GPU(s), 2 CPUs · 45 pass, 2 xfail` -> {"pass": 45, "xfail": 2}."""
    return {outcome: int(n) for n, outcome in (part.split() for part in summary.split(" · ")[1].split(", "))}


@pytest.fixture(scope="module")
def level2(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], dict, str]:
    """`ds-doctor run` as the quick start runs it: level 2, the reports under ./ds-doctor-reports/."""
    folder = tmp_path_factory.mktemp("quick-start")
    proc = subprocess.run(
        [sys.executable, "-m", "ds_doctor.cli", "run"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=folder,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    (report_file,) = (folder / "ds-doctor-reports").glob("ds-doctor-*.json")
    report = json.loads(report_file.read_text())
    validate(report)
    return proc.stdout.splitlines(), report, report_file.with_suffix(".md").read_text()


def test_the_quick_start_shows_what_a_level_2_run_prints(level2: tuple[list[str], dict, str]) -> None:
    printed, report, _ = level2
    shown = quick_start_output()
    host = report["hardware"]["host"]
    # the plan: the same first line (the count is the run's number of cases)
    assert printed[0] == shown[0], (printed[0], shown[0])
    assert f"level 2, {len(report['results'])} case(s) to run" in shown[0]
    # a case line as the run prints one
    case, outcome = shown[1].split()[:2]
    assert any(line.split()[:2] == [case, outcome] for line in printed), shown[1]
    # the outcome counts, and the traps line, as the run ends
    outcomes = [r["outcome"] for r in report["results"]]
    counts = {outcome: outcomes.count(outcome) for outcome in set(outcomes)}
    (printed_summary,) = [line for line in printed if " · " in line]
    assert outcome_counts(next(line for line in shown if " · " in line)) == counts
    assert outcome_counts(printed_summary) == counts
    traps = next(line for line in shown if line.startswith("library traps"))
    assert traps in printed
    # the report paths: the default folder, the host and a UTC time in each name, in this order
    paths = [line for line in printed if line.endswith((".json", ".md", ".html")) and " report: " in line]
    shown_paths = [line for line in shown if " report: " in line]
    assert [STAMP.sub("<time>", p.replace(f"-{host}-", "-<host>-")) for p in paths] == [
        STAMP.sub("<time>", p.replace("-vm-", "-<host>-")) for p in shown_paths
    ]


def test_a_healthy_level_2_warns_about_nothing_of_ds_doctors_own(level2: tuple[list[str], dict, str]) -> None:
    """Issue 45: a healthy level 2 warned about ds-doctor's own bf16 configs (`grad_accum_dtype`), named a rank a
    straggler at a setup stage ("build ShareMemCommBuilder"), showed one-rank collectives' bandwidth, and headed
    one node's rows "per pair of nodes"."""
    _, report, markdown = level2
    results = {r["case"]: r for r in report["results"]}
    passed = [r for r in results.values() if r["outcome"] == "pass"]
    said = [(r["case"], f["invariant"]) for r in passed for f in r["findings"]]
    assert said == []
    assert "## Warnings" not in markdown and "straggler" not in markdown
    for collective in collectives.COLLECTIVES:
        one_rank, two = results[f"comm[{collective}-ws1]"], results[f"comm[{collective}-ws2]"]
        assert one_rank["series"] == [] and one_rank["measures"] == {"algbw_gbps": None, "busbw_gbps": None}
        assert len(two["series"]) == 4 and two["measures"]["busbw_gbps"] > 0
    assert "\nPer size (busbw = algbw" in markdown and "per pair of nodes" not in markdown
    assert "| `comm[all_reduce-ws1]` | — (one rank: no data moves between ranks) |" in markdown

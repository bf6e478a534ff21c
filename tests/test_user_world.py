"""ds-doctor run from inside a user's project, as a user runs it: the project has its own `probes/`, `reports/` and
`doctor.py` (common names in training repositories), and its --model factory changes directory and leaves a daemon
behind. The ranks import ds-doctor's packages, the factory's module still imports, the run directory is not lost,
and nothing the factory started outlives the run (issues 21 and 27)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.bounds import GENEROUS_S
from tests.test_e2e import leftover_processes

CONSOLE_SCRIPT = Path(sys.executable).parent / "ds-doctor"

FACTORY = """
import os, subprocess, sys
import torch

def make():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{marker}"], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.chdir("/")
    return torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
"""


def make_project(root: Path, marker: str) -> None:
    for package in ("probes", "reports"):
        (root / package).mkdir()
        (root / package / "__init__.py").write_text(
            f"raise ImportError('the project\\'s own {package} package')\n"
        )
    (root / "doctor.py").write_text('raise ImportError("the project\'s own doctor.py")\n')
    (root / "models").mkdir()
    (root / "models" / "__init__.py").write_text("")
    (root / "models" / "tiny.py").write_text(textwrap.dedent(FACTORY.format(marker=marker)))


@pytest.mark.multirank
@pytest.mark.skipif(
    not CONSOLE_SCRIPT.exists(), reason="the ds-doctor console script is not installed in this venv"
)
def test_a_run_from_a_project_with_look_alike_packages(tmp_path: Path) -> None:
    marker = f"ds-doctor-daemon-{tmp_path.name}"
    make_project(tmp_path, marker)
    proc = subprocess.run(
        [
            str(CONSOLE_SCRIPT),
            "run",
            "--out",
            "out",
            "--json",
            "--model",
            "models.tiny:make",
            "-k",
            "zero_offload and ws1",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout[-1000:], proc.stderr[-3000:])
    results = {r["case"]: r for r in json.loads(proc.stdout)["results"]}
    ran = [r for case, r in results.items() if case.startswith("zero_offload")]
    assert ran and all(r["outcome"] == "pass" for r in ran), ran
    assert list((tmp_path / "out").glob("ds-doctor-*.json")) and list((tmp_path / "out").glob("run-*/ws1-*"))
    deadline = time.monotonic() + GENEROUS_S  # daemons left behind stay for ever
    while leftover_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    # the daemons the factory started (check and ranks) ended with the run
    assert leftover_processes(marker) == []


@pytest.mark.parametrize("package", ["reports", "probes", "doctor"])
def test_a_job_with_a_look_alike_package_imports_the_api_and_runs_the_cli(
    tmp_path: Path, package: str
) -> None:
    """Inside a user's job (`python train.py` puts its folder first), a project's own `reports/`, `probes/` or
    `doctor/` shadows nothing: ds-doctor is one import name, `ds_doctor` (it used to refuse: rename your folder)."""
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text(
        f"raise ImportError('the project\\'s own {package} package')\n"
    )
    (tmp_path / "train.py").write_text(
        "from ds_doctor.api import inspect, watch\nimport ds_doctor.cli\nprint('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-1000:]
    listed = subprocess.run(
        [sys.executable, "-m", "ds_doctor.cli", "list", "-k", "zero_offload and z3-opt+param"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0 and "zero_offload[z3-opt+param-bf16-ws2]" in listed.stdout, listed.stderr[
        -1000:
    ]

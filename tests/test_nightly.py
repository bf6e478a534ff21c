"""docs/nightly: the nightly wrapper run for real (level 1, seconds): the first healthy run becomes the
node's baseline, JUnit and Prometheus are published, and a later run that lost a GPU against that
baseline exits 1. The Slurm script and the systemd units are checked for syntax."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NIGHTLY = ROOT / "docs" / "nightly"


def nightly(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DS_DOCTOR": f"{sys.executable} -m ds_doctor.cli",
        "LEVEL": "1",
        "STATE_DIR": str(tmp_path / "state"),
        "TEXTFILE_DIR": str(tmp_path / "textfile"),
    }
    return subprocess.run(
        ["bash", str(NIGHTLY / "ds-doctor-nightly.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )


def test_first_run_makes_the_baseline_and_a_lost_gpu_regresses(tmp_path: Path) -> None:
    node = tmp_path / "state" / socket.gethostname().split(".")[0]
    proc = nightly(tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    baseline = node / "baseline.json"
    assert "is now the baseline" in proc.stdout and baseline.is_file()
    assert (node / "junit.xml").read_text().startswith("<?xml")
    assert "ds_doctor_run_duration_seconds" in (tmp_path / "textfile" / "ds_doctor.prom").read_text()

    proc = nightly(tmp_path)  # same node, nothing changed: diffed, no regression
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "no regression" in proc.stdout and len(list((node / "reports").glob("*.diff.md"))) == 1

    # the baseline remembers one more GPU than the node has now: a regression, exit 1
    data = json.loads(baseline.read_text())
    data["hardware"]["gpus"] = [
        *data["hardware"]["gpus"],
        {
            "index": len(data["hardware"]["gpus"]),
            "name": "lost GPU",
            "memory_total_bytes": 80 << 30,
            "unavailable": {},
        },
    ]
    baseline.write_text(json.dumps(data))
    proc = nightly(tmp_path)
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert "REGRESSED" in proc.stdout and "GPU count" in proc.stdout
    assert json.loads(baseline.read_text()) == data  # a failing run never replaces the baseline


def test_the_slurm_script_and_systemd_units_are_well_formed() -> None:
    for script in ("ds-doctor-nightly.sh", "ds-doctor-nightly.sbatch"):
        subprocess.run(["bash", "-n", str(NIGHTLY / script)], check=True)
    sbatch = (NIGHTLY / "ds-doctor-nightly.sbatch").read_text()
    assert "#SBATCH --ntasks-per-node=1" in sbatch and "ds-doctor-nightly.sh" in sbatch
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze not installed")
    proc = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            str(NIGHTLY / "ds-doctor-nightly.timer"),
            str(NIGHTLY / "ds-doctor-nightly.service"),
        ],
        capture_output=True,
        text=True,
    )
    # the only complaint allowed: the install path /opt/ds-doctor does not exist on this machine
    complaints = [line for line in proc.stderr.splitlines() if line.strip() and "/opt/ds-doctor" not in line]
    assert complaints == [], proc.stderr

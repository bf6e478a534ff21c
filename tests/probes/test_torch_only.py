"""A node with torch and nothing else the families use (no accelerate, deepspeed, numpy or transformers): the
equivalence family's torch routes run and pass, the rest skip naming what to install, and the run exits 0."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.test_e2e import ROOT, ds_doctor

NOT_INSTALLED = "accelerate,deepspeed,numpy,transformers,prodigyplus,prodigyopt,safetensors"

pytestmark = pytest.mark.multirank


def test_the_torch_routes_run_on_a_node_with_torch_alone(tmp_path: Path) -> None:
    proc = ds_doctor(
        "run",
        "--level",
        "3",
        "-k",
        # (not FSDP2's step-0 state dict nor the nested SequentialLR: they fail on today's torch, open torch bugs with
        # entries of their own)
        "equivalence and (ddp or fsdp2 or deepspeed-z2 or accelerate-ws) and not offload and not resume "
        "and not state-dict-first and not nested",
        "--out",
        str(tmp_path),
        extra_env={
            "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "resources" / "not_installed"), str(ROOT)]),
            "DS_TEST_NOT_INSTALLED": NOT_INSTALLED,
        },
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (report,) = tmp_path.glob("ds-doctor-*.json")
    results = {r["case"]: r for r in json.loads(report.read_text())["results"]}
    assert (
        results["equivalence[accelerate-ws1]"]["outcome"] == "skip"
    )  # the blocker works: accelerate is "absent"
    for route in ("ddp", "fsdp2"):
        for ws in (1, 2):
            assert results[f"equivalence[{route}-ws{ws}]"]["outcome"] == "pass", results[
                f"equivalence[{route}-ws{ws}]"
            ]
    for ws in (1, 2):
        skipped = results[f"equivalence[deepspeed-z2-ws{ws}]"]
        assert skipped["outcome"] == "skip" and "pip install deepspeed" in skipped["reason"]

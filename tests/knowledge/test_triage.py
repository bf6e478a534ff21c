"""`ds-doctor triage` on the real exception texts the S0/S1 probes produced (tests/resources/triage)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from doctor.cli import main
from doctor.knowledge.triage import triage
from reports.records import Verdict

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "resources" / "triage"

#: resource file -> the one known issue it must match (captured from real runs: deepspeed 0.19.8, accelerate 1.15)
EXPECTED = {
    "s1_z2_frozen_not_in_param_names.txt": "ds_frozen_param_not_in_param_names",
    "s1_z3_dispatch_save.txt": "ds_z3_param_replaced_after_init",
    "s1_z1_assign_step.txt": "ds_replaced_trainable_param_not_trained",
    "s0_scheduler_before_prepare.txt": "acc_ds_placeholder_used_before_prepare",
    "s0_scheduler_second_prepare.txt": "acc_ds_placeholder_used_before_prepare",
    "s0_scheduler_second_prepare_auto.txt": "acc_ds_auto_value_unfilled",
    "s0_real_optimizer.txt": "acc_ds_optimizer_defined_twice",
    "s0_dummy_optim_no_config.txt": "acc_ds_optimizer_defined_twice",
    "s0_real_scheduler.txt": "acc_ds_scheduler_defined_twice",
    "s0_dummy_scheduler_no_config.txt": "acc_ds_scheduler_missing",
    "s0_no_dataloader.txt": "acc_ds_auto_batch_needs_dataloader",
}
VERSIONS = {"deepspeed": "0.19.8", "accelerate": "1.15.0", "torch": "2.13.0"}


def test_every_captured_trace_is_in_the_table() -> None:
    assert sorted(p.name for p in TRACES.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize(("name", "issue_id"), sorted(EXPECTED.items()))
def test_each_real_trace_matches_exactly_its_issue(name: str, issue_id: str) -> None:
    matches = triage((TRACES / name).read_text(), VERSIONS)
    assert [m.issue.id for m in matches] == [issue_id]
    assert matches[0].version.version == VERSIONS[matches[0].package]
    assert matches[0].version.source == "this machine"  # these traces name no version
    collapsed = " ".join((TRACES / name).read_text().split())
    assert matches[0].line and all(piece in collapsed for piece in matches[0].line.split(" … "))  # the matched span
    assert len(matches[0].line) <= 200


def test_versions_are_judged_against_the_installed_ones() -> None:
    text = "AttributeError: 'Linear' object has no attribute 'ds_grads_remaining'"
    assert [m.issue.verdict for m in triage(text, {"deepspeed": "0.19.2"})] == [Verdict.AFFECTED]
    assert [m.issue.verdict for m in triage(text, {"deepspeed": "0.19.8"})] == [Verdict.NOT_AFFECTED]
    assert [m.issue.verdict for m in triage(text, {})] == [Verdict.UNKNOWN]


def test_the_earliest_error_in_a_log_comes_first_and_secrets_are_scrubbed() -> None:
    log = ("rank0: HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789 ValueError: You cannot specify an optimizer in the "
           "config file and in the code at the same time\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n  exitcode  : -9 (pid: 12)\n")
    matches = triage(log, VERSIONS)
    assert [m.issue.id for m in matches] == ["acc_ds_optimizer_defined_twice", "torchrun_child_sigkill"]
    assert "hf_abcdefghij" not in matches[0].line and "You cannot specify an optimizer" in matches[0].line


def test_cli_exit_codes_file_stdin_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["triage", str(TRACES / "s0_real_scheduler.txt")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[acc_ds_scheduler_defined_twice]") and "remedy:" in out
    assert "accelerate 1.15.0 (from this machine)" in out
    assert main(["triage", "--json", str(TRACES / "s1_z2_frozen_not_in_param_names.txt")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["id"] for m in data["matches"]] == ["ds_frozen_param_not_in_param_names"]
    assert {"cause", "remedy", "refs", "verdict", "version", "version_from", "matched"} <= set(data["matches"][0])
    nothing = tmp_path / "clean.log"
    nothing.write_text("epoch 1 loss 0.25\n")
    assert main(["triage", str(nothing)]) == 1
    assert "no known issue" in capsys.readouterr().out
    for bad in ([str(tmp_path / "missing.log")], [str(tmp_path)]):  # an empty directory holds no dump
        assert main(["triage", *bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("ds-doctor: error:") and len(err.strip().splitlines()) == 1
    stdin = (TRACES / "s0_no_dataloader.txt").read_text()
    proc = subprocess.run([sys.executable, "-m", "doctor.cli", "triage", "-"], input=stdin, capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0 and "[acc_ds_auto_batch_needs_dataloader]" in proc.stdout

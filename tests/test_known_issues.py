"""The classifier on real error texts, and version verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor import known_issues
from doctor.known_issues import AFFECTED, NOT_AFFECTED, UNKNOWN

RESOURCES = Path(__file__).parent / "resources"
S2_ID = "ds_z3_offload_gradnorm_device_mismatch"


def test_the_s2_traceback_is_recognised() -> None:
    # The frames of DeepSpeed issue #5538 (LLaMA-Factory, ZeRO-3 + offload, deepspeed 0.14.2).
    text = (RESOURCES / "ds_5538_unscale_and_clip.txt").read_text()
    assert [issue.id for issue in known_issues.classify(text)] == [S2_ID]


def test_a_generic_device_mismatch_without_zero3_frames_is_not_claimed() -> None:
    text = "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!"
    assert known_issues.classify(text) == []


@pytest.mark.parametrize(
    ("version", "verdict"),
    [("0.14.0", NOT_AFFECTED), ("0.14.1", AFFECTED), ("0.14.2", AFFECTED), ("0.14.3", NOT_AFFECTED),
     ("0.19.8", NOT_AFFECTED), (None, UNKNOWN), ("not-a-version", UNKNOWN)],
)
def test_version_verdict_for_the_s2_issue(version, verdict) -> None:
    assert known_issues.get(S2_ID).version_verdict({"deepspeed": version}) == verdict


def test_issues_without_a_version_range_give_unknown() -> None:
    assert known_issues.get("ds_jit_ninja_missing").version_verdict({"deepspeed": "0.19.8"}) == UNKNOWN


@pytest.mark.parametrize(
    ("text", "issue_id"),
    [
        ("deepspeed.runtime.zero.utils.ZeRORuntimeException: You are using ZeRO-Offload with a client provided "
         "optimizer (<class 'torch.optim.adamw.AdamW'>) which in most cases will yield poor performance.",
         "ds_offload_client_optimizer_rejected"),
        ("RuntimeError: Ninja is required to load C++ extensions", "ds_jit_ninja_missing"),
        ("AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'", "ds_cpu_adam_build_failed"),
        ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
         "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
         "torchrun_port_in_use"),
        ("exitcode  : -9 (pid: 4242)\n  traceback : Signal 9 (SIGKILL) received by PID 4242", "torchrun_child_sigkill"),
        ("Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
         "ds_fp16_loss_scale_at_minimum"),
    ],
)
def test_other_entries_match_their_upstream_texts(text, issue_id) -> None:
    assert issue_id in [issue.id for issue in known_issues.classify(text)]


def test_every_entry_has_a_remedy_and_references() -> None:
    for issue in known_issues.ISSUES:
        assert issue.remedy and issue.refs and issue.patterns, issue.id
        assert all(ref.startswith("https://github.com/") for ref in issue.refs), issue.id

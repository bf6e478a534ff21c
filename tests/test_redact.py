"""Secrets are scrubbed from every string; ordinary values survive."""

from __future__ import annotations

import pytest

from doctor.env import relevant_variables
from doctor.redact import MASK, scrub, scrub_text

SECRETS = [
    "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7",
    "ghp_" + "A" * 36,
    "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "AKIA" + "IOSFODNN7EXAMPLE",
    "sk-" + "proj-abcdefghijklmnopqrstuvwxyz012345",
    "xoxb-" + "123456789012-123456789012-abcdefghij",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_secret_shapes_are_masked_inside_text(secret) -> None:
    out = scrub_text(f"error at step 3 with {secret} in the log")
    assert secret not in out and MASK in out and out.startswith("error at step 3")


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("git clone https://alice:s3cr3tpass@example.com/repo.git", "s3cr3tpass"),
        ("train.py --token=abc123def --lr 1e-3", "abc123def"),
        ("train.py --password hunter2 --lr 1e-3", "hunter2"),
        ("api_key=zzz-999-yyy", "zzz-999-yyy"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----", "MIIEow"),
    ],
)
def test_credentials_in_urls_flags_and_assignments(text, secret) -> None:
    out = scrub_text(text)
    assert secret not in out
    assert "--lr 1e-3" in out or "--lr" not in text


def test_ordinary_values_survive() -> None:
    data = {"path": "/home/x/.cache/torch_extensions/py311_cpu", "version": "0.19.8",
            "commit": "edaa722f1c2b3a4d5e6f7a8b9c0d1e2f3a4b5c6d", "cmd": ["torchrun", "--nproc-per-node=2"]}
    assert scrub(data) == data


def test_env_section_is_an_allowlist_and_masks_secret_names() -> None:
    env = {"NCCL_DEBUG": "INFO", "HF_TOKEN": "hf_x", "HOME": "/root", "DS_API_KEY": "x", "MASTER_PORT": "29500",
           "AWS_SECRET_ACCESS_KEY": "y"}
    assert relevant_variables(env) == {"DS_API_KEY": MASK, "MASTER_PORT": "29500", "NCCL_DEBUG": "INFO"}

"""Secrets are scrubbed from every string; ordinary values survive."""

from __future__ import annotations

import pytest

from doctor.hardware.env import relevant_variables
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


def test_anonymizer_replaces_identifiers_with_stable_placeholders() -> None:
    from doctor.redact import Anonymizer

    anon = Anonymizer(hosts=["gpu-node-12", "gpu-node-12.cluster.local"], users=["alice"])
    data = {
        "host": "gpu-node-12",
        "fqdn": "ssh gpu-node-12.cluster.local failed",
        "run_dir": "/scratch/alice/out/run-gpu-node-12-20261121T000000Z-42",
        "other_node": "gpu-node-123 stays",  # another host, not a prefix match
        "gpus": [{"uuid": "GPU-3f2a1b4c-5d6e-7f80-9a1b-2c3d4e5f6a7b"}, {"uuid": "GPU-3f2a1b4c-5d6e-7f80-9a1b-2c3d4e5f6a7b"}],
        "addrs": "10.0.0.7 and 10.0.0.8 and 127.0.0.1 and fe80:0:0:0:202:b3ff:fe1e:8329",
        "version": "2.13.0", "driver": "550.54.15", "cmd": "torchrun --nproc-per-node=8",
    }
    out = anon(data)
    assert out["host"] == "host-1" and out["fqdn"] == "ssh host-2 failed"
    assert out["run_dir"] == "/scratch/user-1/out/run-host-1-20261121T000000Z-42"
    assert out["other_node"] == "gpu-node-123 stays"
    assert [g["uuid"] for g in out["gpus"]] == ["gpu-uuid-1", "gpu-uuid-1"]  # the same value, the same placeholder
    assert out["addrs"] == "ip-1 and ip-2 and 127.0.0.1 and ip-3"
    assert (out["version"], out["driver"], out["cmd"]) == ("2.13.0", "550.54.15", "torchrun --nproc-per-node=8")


def test_a_common_word_host_is_replaced_only_as_a_whole_value() -> None:
    from doctor.redact import Anonymizer

    out = Anonymizer(hosts=["vm"], users=[])({"host": "vm", "text": "vm.max_map_count is low on this vm"})
    assert out == {"host": "host-1", "text": "vm.max_map_count is low on this vm"}

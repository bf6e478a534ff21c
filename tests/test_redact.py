"""Secrets are scrubbed by their shape and by the name they sit under; ordinary values (and every field of a
report) survive, and scrubbing stays linear on long hostile lines. Fake values, real shapes: each is built
from pieces so that no scanner takes this file for a leak."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ds_doctor.hardware.env import relevant_variables
from ds_doctor.redact import MASK, Anonymizer, is_secret_name, scrub, scrub_text
from tests.bounds import ratio

RESOURCES = Path(__file__).resolve().parent / "resources"
HEX40 = "0123456789abcdef0123456789abcdef01234567"
B64 = "MIIEowIBAAKCAQEAzQx9plantedKeyBodyLine0123456789abcdefghijklmnopq"

SECRETS = [
    "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7",
    "api_org_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7",
    "ghp_" + "A" * 36,
    "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    "glpat-" + "xK9mP2vL8nQ4wR7tY1zB",
    "AKIA" + "IOSFODNN7EXAMPLE",
    "ASIA" + "Q2W3E4R5T6Y7U8I9",
    "sk-" + "proj-abcdefghijklmnopqrstuvwxyz012345",
    "sk-" + "ant-api03-abcdefghijklmnopqrstuvwxyz0123456789",
    "sk_" + "live_51HqLyjWDarjtT1zdp7dcXyz",
    "xoxb-" + "123456789012-123456789012-abcdefghij",
    "xapp-" + "1-A0123456789-0123456789012-abcdef0123",
    "npm_" + "a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6q7r8",
    "pypi-" + "AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejAxMjM0AAIqWzMsImFiYyJdAAAGIKZ6",
    "AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    "ya29." + "a0AfH6SMBx-planted-oauth-access-token",
    "dapi" + "0123456789abcdef0123456789abcdef",
    "SK" + "0123456789abcdef0123456789ABCDEF",
    "SG." + "abcdefghijklmnopqrstuv" + "." + "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
    "123456789" + ":AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1",
    "nvapi-" + "Ab3dE5fG7hIj9kLm1nOp3qRs5tUv7wXy9zAb1cDe3fGh5iJk7lMn9oPq1rSt3uVw",
    "dckr_pat_" + "Ab3dE5fG7hIj9kLm1nOp3qRs5tU",
    "hvs." + "CAESIJqlanted0123456789abcdef",
    "AGE-SECRET-KEY-1" + "QQPZRY9X8GF2TVDW0S3JN54KHCE6MUA7LQQPZRY9X8GF2TVDW0S3JN54KH",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "eyJ"
    + "hcGlfYWRkcmVzcyI6Imh0dHBzOi8vYXBwLm5lcHR1bmUuYWkiLCJhcGlfa2V5IjoicGxhbnRlZCJ9",  # Neptune: base64 JSON
]


@pytest.mark.parametrize("secret", SECRETS)
def test_secret_shapes_are_masked_inside_text(secret: str) -> None:
    out = scrub_text(f"error at step 3 with {secret} in the log")
    assert secret not in out and out == f"error at step 3 with {MASK} in the log"
    assert scrub_text(f"token={secret},") == f"token={MASK},"


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
def test_credentials_in_urls_flags_and_assignments(text: str, secret: str) -> None:
    out = scrub_text(text)
    assert secret not in out
    assert "--lr 1e-3" in out or "--lr" not in text


#: (text, what it becomes): the context (header, flag, key name, URL scheme and host) stays, the secret goes.
SHAPES = [
    ("Authorization: Bearer abc.def-ghi_jkl", f"Authorization: Bearer {MASK}"),
    ("curl -H 'Authorization: Bearer eyJabc'", f"curl -H 'Authorization: Bearer {MASK}'"),
    ("retrying with Bearer 0f3a9c2d71e4b5a6 now", f"retrying with Bearer {MASK} now"),
    (
        '{"headers": {"Authorization": "token abc123def456"}}',
        f'{{"headers": {{"Authorization": "token {MASK}"}}}}',
    ),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", f"Authorization: Basic {MASK}"),
    ("the proxy refused Basic dXNlcjpwYXNzd29yZA== twice", f"the proxy refused Basic {MASK} twice"),
    (f"wandb login {HEX40}", f"wandb login {MASK}"),
    (f"WANDB_API_KEY={HEX40} python train.py", f"WANDB_API_KEY={MASK} python train.py"),
    (f"wandb: Appending key for api.wandb.ai: {HEX40}", f"wandb: Appending key for api.wandb.ai: {MASK}"),
    (
        f"machine api.wandb.ai\n  login user\n  password {HEX40}\n",
        f"machine api.wandb.ai\n  login user\n  password {MASK}\n",
    ),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", f"aws_secret_access_key = {MASK}"),
    ('"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",', f'"SecretAccessKey": "{MASK}",'),
    # private keys: whole, cut at the start (a kept log tail), cut at the end, PGP, inside JSON
    (
        f"-----BEGIN EC PRIVATE KEY-----\n{B64}\n-----END EC PRIVATE KEY-----\nnext",
        f"-----BEGIN EC PRIVATE KEY-----{MASK}-----END EC PRIVATE KEY-----\nnext",
    ),
    (
        f"{B64[20:]}\n{B64}\nabc=\n-----END RSA PRIVATE KEY-----\n[rank1] next",
        f"{MASK}-----END RSA PRIVATE KEY-----\n[rank1] next",
    ),
    (
        f"[rank0]: failed\n[rank0]: {B64[30:]}\n{B64}\n-----END PRIVATE KEY-----",
        f"[rank0]: failed\n[rank0]: {MASK}-----END PRIVATE KEY-----",
    ),
    (
        f"log line\n-----BEGIN OPENSSH PRIVATE KEY-----\n{B64}\n{B64[:20]}",
        f"log line\n-----BEGIN OPENSSH PRIVATE KEY-----{MASK}",
    ),
    (
        f"-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: x\n\n{B64}\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----\nok",
        f"-----BEGIN PGP PRIVATE KEY BLOCK-----{MASK}-----END PGP PRIVATE KEY BLOCK-----\nok",
    ),
    (f"{B64}\n=abcd\n-----END PGP PRIVATE KEY BLOCK-----", f"{MASK}-----END PGP PRIVATE KEY BLOCK-----"),
    (
        '{"type": "service_account", "private_key_id": "0a1b2c3d4e5f", "private_key": "-----BEGIN PRIVATE KEY-----\\n'
        + B64
        + '\\n-----END PRIVATE KEY-----\\n", "client_email": "ds@p.iam.gserviceaccount.com"}',
        f'{{"type": "service_account", "private_key_id": "{MASK}", "private_key": "-----BEGIN PRIVATE KEY-----{MASK}'
        '-----END PRIVATE KEY-----\\n", "client_email": "ds@p.iam.gserviceaccount.com"}',
    ),
    # webhooks
    (
        "posting to https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXX now",
        f"posting to https://hooks.slack.com/services/{MASK} now",
    ),
    ("https://discord.com/api/webhooks/123456/abc-DEF_ghi", f"https://discord.com/api/webhooks/{MASK}"),
    ("https://discordapp.com/api/webhooks/123456/abc-DEF_ghi", f"https://discordapp.com/api/webhooks/{MASK}"),
    (
        "https://contoso.webhook.office.com/webhookb2/a1@b2/IncomingWebhook/c3/d4 failed",
        f"https://contoso.webhook.office.com/{MASK} failed",
    ),
    ("webhook_url: https://example.com/hook/abc", f"webhook_url: {MASK}"),
    # connection strings and URLs
    (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=abc+def/ghi==;EndpointSuffix=core.windows.net",
        f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={MASK};EndpointSuffix=core.windows.net",
    ),
    (
        "Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=s3cr3t+/=;EntityPath=q",
        f"Endpoint=sb://x.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={MASK};EntityPath=q",
    ),
    (
        "https://acct.blob.core.windows.net/c/f.bin?sv=2021-06-08&se=2026-01-01&sig=abc%2Bdef%3D&sp=r",
        f"https://acct.blob.core.windows.net/c/f.bin?sv=2021-06-08&se=2026-01-01&sig={MASK}&sp=r",
    ),
    (
        "s3://b/k?X-Amz-Credential=AKIA%2F2026&X-Amz-Signature=abcdef0123&X-Amz-Expires=60",
        f"s3://b/k?X-Amz-Credential={MASK}&X-Amz-Signature={MASK}&X-Amz-Expires=60",
    ),
    (
        "mongodb+srv://user:pa55word@cluster0.mongodb.net/db",
        f"mongodb+srv://user:{MASK}@cluster0.mongodb.net/db",
    ),
    ("postgres://admin:pgS3cret@db.internal:5432/runs", f"postgres://admin:{MASK}@db.internal:5432/runs"),
    ("redis://:r3disPw@cache:6379/0", f"redis://:{MASK}@cache:6379/0"),
    ("https://x-access-token:abc123@github.com/o/r.git", f"https://x-access-token:{MASK}@github.com/o/r.git"),
    ("https://0123456789abcdef0123456789@github.com/o/r", f"https://{MASK}@github.com/o/r"),
    ("https://host/v1?token=abc123&x=1", f"https://host/v1?token={MASK}&x=1"),
    (
        "https://host/v1?a=1&access_token=abc&api_key=def&b=2",
        f"https://host/v1?a=1&access_token={MASK}&api_key={MASK}&b=2",
    ),
    # names: flags, assignments, YAML, JSON, Python reprs, dotted overrides
    ("train.py --hf-token hf_x --sort-key name", f"train.py --hf-token {MASK} --sort-key name"),
    ("comet.api_key=c0met0123 trainer.max_tokens=512", f"comet.api_key={MASK} trainer.max_tokens=512"),
    ("  password: hunter2\n  user: alice", f"  password: {MASK}\n  user: alice"),
    ('{"password": "c0rrect horse battery"}', f'{{"password": "{MASK}"}}'),
    ("os.environ['WANDB_API_KEY'] = 'k3y0123456789'", f"os.environ['WANDB_API_KEY'] = '{MASK}'"),
    ("JUPYTER_TOKEN=mysupersecrettoken jupyter lab", f"JUPYTER_TOKEN={MASK} jupyter lab"),
    ("password = correct_horse_battery  # not args.password", f"password = {MASK}  # not args.password"),
    (
        "comet ... api_key='c0met-k3y-0123' experiment_key='3f2a1b0c9d8e' project='ds'",
        f"comet ... api_key='{MASK}' experiment_key='{MASK}' project='ds'",
    ),
]


@pytest.mark.parametrize(("text", "scrubbed"), SHAPES)
def test_each_shape_keeps_its_context_and_loses_the_secret(text: str, scrubbed: str) -> None:
    assert scrub_text(text) == scrubbed
    assert scrub_text(scrubbed) == scrubbed  # a report scrubbed again (recover) stays as it was


SECRET_NAMES = [
    "api_key",
    "apiKey",
    "APIKey",
    "x-api-key",
    "Api Key",
    "comet.api_key",
    "experiment_key",
    "wandb_key",
    "key",
    "token",
    "auth_token",
    "hf_token",
    "hfToken",
    "HF_TOKEN",
    "access_token",
    "sas_token",
    "password",
    "db_password",
    "passwd",
    "secret",
    "client_secret",
    "private_key",
    "private_key_id",
    "access_key_id",
    "aws_secret_access_key",
    "AWS_SECRET_ACCESS_KEY",
    "AccountKey",
    "Authorization",
    "auth",
    "credentials",
    "cookie",
    "webhook_url",
    "connection_string",
    "DS_API_KEY",
    "DS_SOME_KEY",
    "api_keys",
    "access_tokens",
]
ORDINARY_NAMES = [
    "max_tokens",
    "num_tokens",
    "tokens",
    "tokenizer",
    "tokenizer_config",
    "missing_keys",
    "unexpected_keys",
    "keys",
    "keys_compared",
    "key_padding_mask",
    "monkey",
    "sort_key",
    "cache_key",
    "store_based_barrier_key",
    "author",
    "authority",
    "pad_token",
    "eos_token",
    "pad_token_id",
    "token_type_ids",
    "password_file",
    "secret_name",
    "auth_type",
    "pass",
    "passes",
    "TOKENIZERS_PARALLELISM",
    "NCCL_IB_PKEY",
    "hotkey",
    "keyboard",
    "signal",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_names_that_say_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_ordinary_names_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


def test_values_under_a_secret_key_are_masked_at_any_depth() -> None:
    config = {
        "train_batch_size": 8,
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}},
        "comet": {"enabled": True, "api_key": "c0met-k3y", "experiment_key": "3f2a1b", "project": "ds"},
        "wandb": {"enabled": True, "team": "t", "project": "p", "token": HEX40},
        "credentials": {
            "user": "alice",
            "password": "pw",
            "port": 5432,
            "ssl": True,
            "ca": None,
            "hosts": ["h1"],
        },
        "clients": [{"name": "a", "client_secret": "cs-1"}, {"name": "b", "Authorization": "Bearer xyz"}],
        "tokenizer": {
            "max_tokens": 512,
            "pad_token": "<pad>",
            "patch_token": "<|patch|>",
            "special_tokens": ["<s>"],
        },
        "missing_keys": ["a.weight"],
        "key_padding_mask": True,
        "sort_key": "name",
        "author": "bob",
        "empty": {"password": ""},
        "service": ("x", {"private_key": 12345, "PASSWORD": None}),
    }
    expected = copy.deepcopy(config)
    expected["comet"].update(api_key=MASK, experiment_key=MASK)  # type: ignore[attr-defined]
    expected["wandb"]["token"] = MASK  # type: ignore[index]
    expected["credentials"] = {
        "user": MASK,
        "password": MASK,
        "port": MASK,
        "ssl": True,
        "ca": None,
        "hosts": [MASK],
    }
    expected["clients"] = [{"name": "a", "client_secret": MASK}, {"name": "b", "Authorization": MASK}]
    expected["service"] = ["x", {"private_key": MASK, "PASSWORD": None}]
    assert scrub(config) == expected


def test_a_secret_flag_and_its_value_as_two_items_of_an_argv_list() -> None:
    argv = [
        "train.py",
        "--password",
        "hunter2",
        "--lr",
        "1e-3",
        "--hf-token",
        "abc",
        "--max-tokens",
        "512",
        "--token",
        "--x",
    ]
    assert scrub(argv) == [
        "train.py",
        "--password",
        MASK,
        "--lr",
        "1e-3",
        "--hf-token",
        MASK,
        "--max-tokens",
        "512",
        "--token",
        "--x",
    ]


ORDINARY_TEXT = [
    'Traceback (most recent call last):\n  File "/usr/lib/python3.11/site-packages/torch/distributed/run.py", line 883',
    "/home/x/.cache/torch_extensions/py311_cpu/cpu_adam/cpu_adam.so: cannot open shared object file",
    f"deepspeed 0.19.8 (commit {HEX40}), torch 2.5.1+cu124",
    "123e4567-e89b-12d3-a456-426614174000 GPU-3f2a1b4c-5d6e-7f80-9a1b-2c3d4e5f6a7b",
    "loading tokenizer_config.json from /models/gpt2/tokenizer_config.json",
    "torchrun --rdzv-endpoint host:29500 --rdzv-id 42 --nproc-per-node 8 train.py",
    "generate(max_tokens=512, num_tokens: 3, pad_token=<pad>, key_padding_mask=None)",
    "Rank 0: Completed store-based barrier for key:store_based_barrier_key:1 with 2 nodes.",
    "KeyError: 'module.layers.0.attention.key.weight'",
    "token = token if token is not None else self.args.hub_token",
    "def forward(self, query: Tensor, key: Tensor, value: Tensor) -> Tensor:",
    "attn(q, key=k, value=v); self.auth_token = auth_token; password: str = None",
    "ssh -o PasswordAuthentication=no node-8 hostname",
    "a Bearer token is required; Basic configuration is fine",
    "pass: 3, fail: 1, passed: 4",
    "[2026-11-21 12:00:03,001] [INFO] [config.py:1000:print]   comet ... api_key=None experiment_key=None",
]


@pytest.mark.parametrize("text", ORDINARY_TEXT)
def test_ordinary_text_survives(text: str) -> None:
    assert scrub_text(text) == text


@pytest.mark.parametrize(
    "path",
    sorted(
        [
            *(RESOURCES / "triage").glob("*.txt"),
            *(RESOURCES / "gpu").glob("*.txt"),
            *(RESOURCES / "watchdog").glob("*.log"),
            RESOURCES / "torchrun_sigkill.log",
            RESOURCES / "redact_ordinary.log",
        ]
    ),
    ids=lambda p: p.name,
)
def test_real_logs_survive(path: Path) -> None:
    text = path.read_text()
    assert scrub_text(text) == text


def test_ordinary_values_survive() -> None:
    data = {
        "path": "/home/x/.cache/torch_extensions/py311_cpu",
        "version": "0.19.8",
        "commit": "edaa722f1c2b3a4d5e6f7a8b9c0d1e2f3a4b5c6d",
        "cmd": ["torchrun", "--nproc-per-node=2"],
    }
    assert scrub(data) == data


def rich_report() -> dict[str, Any]:
    """A report with every section filled as a real run fills it (scrubbed once, where it is built)."""
    import dataclasses

    from ds_doctor.hardware.env import package_versions
    from ds_doctor.hardware.nvml import read_gpus
    from ds_doctor.reports.hang import CollectivePosition, Frame, StageTime, ThreadStack
    from ds_doctor.reports.model import Outcome, RankSummary
    from ds_doctor.run.build import build_report
    from tests.hardware.test_nvml import AnsweringNVML, answers
    from tests.reports.samples import NOW, case, every_outcome

    gpus, _, drivers = read_gpus(AnsweringNVML(answers("h100_node_sick.json")))
    env = {
        "python": "3.11.7",
        "executable": "/opt/conda/bin/python",
        "platform": "Linux-6.8-x86_64-with-glibc2.35",
        "packages": package_versions(),
        "cuda": "12.4",
        "nccl": "2.21.5",
        **drivers,
        "variables": {
            "NCCL_DEBUG": "INFO",
            "NCCL_IB_PKEY": "0",
            "MASTER_ADDR": "node-7",
            "MASTER_PORT": "29500",
            "TOKENIZERS_PARALLELISM": "false",
            "CUDA_VISIBLE_DEVICES": "0,1",
            "DS_ACCESS_TOKEN": MASK,
        },
    }
    hardware = {"host": "node-7", "cpus": 16, "memory_bytes": 1 << 37, "gpus": gpus, "gpus_reason": None}
    rank = RankSummary(
        rank=1,
        outcome="timeout",
        stage="step",
        stderr_tail=(RESOURCES / "torchrun_sigkill.log").read_text(),
        stacks=(
            ThreadStack("MainThread", (Frame("wait", "/p/h.py", 22), Frame("... 2 frames")), current=True),
        ),
        collectives=(CollectivePosition("0:default_pg", 1, "all_reduce", 2, "[[1024]] Float", "scheduled"),),
        stages=(StageTime("step", 0.01, 5.0),),
        native_stack="Thread 1 (idle)",
    )
    notes = {
        "deepspeed_config": {
            "train_batch_size": 16,
            "zero_optimization": {"stage": 3},
            "wandb": {"enabled": False, "project": "deepspeed"},
            "comet": {"enabled": False, "api_key": None, "experiment_key": None},
        },
        "keys_compared": 12,
        "missing_keys": [],
        "tokenizer": "gpt2",
        "max_tokens": 512,
        "command_line": "train.py --lr 1e-3",
    }
    measured = case(
        Outcome.PASS,
        "all_reduce",
        probe="comm",
        world_size=2,
        measures={"busbw_gbps": 1.5, "algbw_gbps": 0.75},
        series=({"bytes": 4096, "time_us": 10.0, "algbw_gbps": 0.4, "busbw_gbps": 0.8},),
        notes=notes,
    )
    results = [*every_outcome(), dataclasses.replace(case(Outcome.TIMEOUT, "hung"), ranks=(rank,)), measured]
    node = {"node": 1, "host": "node-8", "env": env, "hardware": hardware}
    return build_report(
        started=NOW,
        finished=NOW,
        level=3,
        argv=("run", "--nproc", "2"),
        env=env,
        hardware=hardware,
        results=results,
        run_dir=Path("/runs/ds-doctor"),
        nodes=(node,),
    ).to_dict()


def key_names(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from key_names(item)
    elif isinstance(value, list):
        for item in value:
            yield from key_names(item)


def test_no_field_of_a_report_is_masked_by_its_name() -> None:
    from ds_doctor.reports.model import load_schema, validate

    report = rich_report()
    validate(report)
    assert [k for k in set(key_names(load_schema())) if is_secret_name(k)] == []
    # a config's empty comet keys, a masked variable
    planted = {"api_key", "experiment_key", "DS_ACCESS_TOKEN"}
    assert {k for k in key_names(report) if is_secret_name(k)} == planted
    assert scrub(report) == report
    assert json.loads(json.dumps(scrub(report))) == report


def test_a_report_loses_only_its_planted_secrets() -> None:
    report = rich_report()
    planted, expected = copy.deepcopy(report), copy.deepcopy(report)
    for data, comet, tail, token in (
        (
            planted,
            {"api_key": "c0met-k3y-0123", "experiment_key": "3f2a1b0c"},
            "Authorization: Bearer 0f3a9c2d71e4b5a6",
            "tok3n-value",
        ),
        (expected, {"api_key": MASK, "experiment_key": MASK}, f"Authorization: Bearer {MASK}", MASK),
    ):
        result = data["results"][-1]
        result["notes"]["deepspeed_config"]["comet"].update(comet)
        result["notes"]["deepspeed_config"]["wandb"]["token"] = token
        data["results"][-2]["ranks"][0]["stderr_tail"] += tail
        data["env"]["variables"]["DS_ACCESS_TOKEN"] = token
        data["command"] += ["--password", token]
    assert scrub(planted) == expected


ADVERSARIAL = {
    "a": "a" * 10**6,
    "dashes": "-" * 10**6,
    "bearer": "Bearer " * 10**5,
    "colons": "://" + ":" * 10**5,
    "hex": "0123456789abcdef" * (10**6 // 16),
    "schemes": "://a:" * (10**6 // 5),
    "key_value": "token=" * (10**6 // 6),
    "open_quotes": 'password="' * 10**5,
    "begin": "-----BEGIN RSA PRIVATE KEY-----" * (10**6 // 31),
    "ends": "-----END RSA PRIVATE KEY-----\n" * (10**6 // 30),
    "base64_lines": ("A" * 64 + "\n") * (10**6 // 65),
    "wandb_hex": f"wandb {HEX40} " * (10**6 // 47),
    "base64_json": "eyJ/" * (10**6 // 4),
    "words": "key: token --token Basic machine login hf_ sk- " * (10**6 // 48),
}


#: a megabyte of an ordinary training log: the baseline a hostile megabyte is timed against
ORDINARY_MB = ((RESOURCES / "redact_ordinary.log").read_text() * 1000)[: 10**6]
#: each hostile megabyte took 0.1-1.6x the ordinary one (2 idle cores); quadratic would take minutes, 100x and more
HOSTILE_RATIO = 10.0


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_a_megabyte_of_hostile_text_is_scrubbed_in_linear_time(name: str) -> None:
    took = ratio(lambda: scrub_text(ADVERSARIAL[name]), lambda: scrub_text(ORDINARY_MB), HOSTILE_RATIO)
    assert took <= HOSTILE_RATIO, f"{took:.1f}x the time of an ordinary megabyte"


def test_env_section_is_an_allowlist_and_masks_secret_names() -> None:
    env = {
        "NCCL_DEBUG": "INFO",
        "HF_TOKEN": "hf_x",
        "HOME": "/root",
        "DS_API_KEY": "x",
        "MASTER_PORT": "29500",
        "AWS_SECRET_ACCESS_KEY": "y",
        "TOKENIZERS_PARALLELISM": "false",
        "DS_SOME_KEY": "z",
        "NCCL_IB_PKEY": "0",
        "DS_DOCTOR_STACKS": "/scratch/stacks",  # ds-doctor's own settings: about the tool, not the stack
        "DS_DOCTOR_MODEL": "hf:qwen3",
    }
    assert relevant_variables(env) == {
        "DS_API_KEY": MASK,
        "DS_SOME_KEY": MASK,
        "MASTER_PORT": "29500",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_PKEY": "0",
        "TOKENIZERS_PARALLELISM": "false",
    }


def test_anonymizer_replaces_identifiers_with_stable_placeholders() -> None:
    anon = Anonymizer(hosts=["gpu-node-12", "gpu-node-12.cluster.local"], users=["alice"])
    data = {
        "host": "gpu-node-12",
        "fqdn": "ssh gpu-node-12.cluster.local failed",
        "run_dir": "/scratch/alice/out/run-gpu-node-12-20261121T000000Z-42",
        "other_node": "gpu-node-123 stays",  # another host, not a prefix match
        "gpus": [
            {"uuid": "GPU-3f2a1b4c-5d6e-7f80-9a1b-2c3d4e5f6a7b"},
            {"uuid": "GPU-3f2a1b4c-5d6e-7f80-9a1b-2c3d4e5f6a7b"},
        ],
        "addrs": "10.0.0.7 and 10.0.0.8 and 127.0.0.1 and fe80:0:0:0:202:b3ff:fe1e:8329",
        "version": "2.13.0",
        "driver": "550.54.15",
        "cmd": "torchrun --nproc-per-node=8",
    }
    out = anon(data)
    assert out["host"] == "host-1" and out["fqdn"] == "ssh host-2 failed"
    assert out["run_dir"] == "/scratch/user-1/out/run-host-1-20261121T000000Z-42"
    assert out["other_node"] == "gpu-node-123 stays"
    # the same value, the same placeholder
    assert [g["uuid"] for g in out["gpus"]] == ["gpu-uuid-1", "gpu-uuid-1"]
    assert out["addrs"] == "ip-1 and ip-2 and 127.0.0.1 and ip-3"
    assert (out["version"], out["driver"], out["cmd"]) == (
        "2.13.0",
        "550.54.15",
        "torchrun --nproc-per-node=8",
    )


def test_a_common_word_host_is_replaced_only_as_a_whole_value() -> None:
    out = Anonymizer(hosts=["vm"], users=[])({"host": "vm", "text": "vm.max_map_count is low on this vm"})
    assert out == {"host": "host-1", "text": "vm.max_map_count is low on this vm"}


def anonymized_here(monkeypatch: pytest.MonkeyPatch, home: str, login: str, passwd: dict[int, str]) -> Any:
    """`--anonymize`'s Anonymizer for a machine whose HOME, login and password database are these."""
    from ds_doctor import redact

    for name in ("USER", "LOGNAME", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", home)
    if login:
        monkeypatch.setenv("USER", login)
    monkeypatch.setattr(redact, "_passwd_name", passwd.get)
    monkeypatch.setattr(redact.os, "getuid", lambda: 1000)
    monkeypatch.setattr("socket.gethostname", lambda: "gpu-node-12")
    monkeypatch.setattr("socket.getfqdn", lambda: "gpu-node-12")
    return Anonymizer.for_this_machine()


PATHS = "/home/alice/t /home/bob/t /root/t /srv/home/t /Users/carol/t /home/home/t"


@pytest.mark.parametrize(
    ("home", "login", "passwd", "expected"),
    [
        # issue 45: HOME=/home made "home" a user name, and every /home/ a placeholder
        ("/home", "alice", {1000: "alice"}, PATHS.replace("/home/alice/", "/home/user-1/")),
        # root identifies no one: nothing masked, however HOME or the login says it
        ("/root", "root", {1000: "root"}, PATHS),
        ("/srv/home", "alice", {}, PATHS.replace("/home/alice/", "/home/user-1/")),
        # a login named like a generic path part identifies no one either: /home/ stays everywhere
        ("/home/home", "home", {1000: "home"}, PATHS),
        # no login in the environment: the password database names it
        ("/home/alice", "", {1000: "alice"}, PATHS.replace("/home/alice/", "/home/user-1/")),
        # a uid without an entry and no login variable (a container): the home folder still is the user's
        ("/home/alice", "", {}, PATHS.replace("/home/alice/", "/home/user-1/")),
        # macOS
        ("/Users/carol", "carol", {}, PATHS.replace("/Users/carol/", "/Users/user-1/")),
    ],
)
def test_the_user_name_comes_from_the_login_and_generic_path_parts_are_never_names(
    monkeypatch: pytest.MonkeyPatch, home: str, login: str, passwd: dict[int, str], expected: str
) -> None:
    anonymize = anonymized_here(monkeypatch, home, login, passwd)
    assert anonymize(PATHS) == expected


def test_the_home_folder_is_masked_only_where_a_path_starts_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # no login known: only the home folder itself says who runs this
    anonymize = anonymized_here(monkeypatch, "/work/ci", "", {})
    assert anonymize('cd /work/ci/repo; ls "/work/ci" /mnt/work/ci/x /work/cia') == (
        'cd /work/user-1/repo; ls "/work/user-1" /mnt/work/ci/x /work/cia'
    )

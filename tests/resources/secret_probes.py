"""A probe registered by the tests only: it leaks planted secrets into every channel a report carries."""

from __future__ import annotations

import sys

from ds_doctor.plugins import ProbeContext, ProbeSpec, Variant

SPEC = ProbeSpec(
    name="leaky",
    scenario="smoke",
    description="plants secrets for the redaction tests",
    world_sizes=(1,),
    timeout_s=60.0,
)

#: name -> (the text that carries it, the part that must never come out). Fake values, real shapes.
SECRETS: dict[str, tuple[str, str]] = {
    "hf_1": ("hf_" + "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr", "Ab12Cd34Ef56Gh78Ij90Kl12Mn34Op56Qr"),
    "hf_2": ("hf_" + "zYxWvUtSrQpOnMlKjIhGfEdCbA0987654321", "zYxWvUtSrQpOnMlKjIhGfEdCbA0987654321"),
    "ghp": ("ghp_" + "R2d2C3poBb8LukeLeiaHanChewie1234567890", "R2d2C3poBb8LukeLeiaHanChewie1234567890"),
    "gho": ("gho_" + "16C7e42F292c6912E7710c838347Ae178B4a2f9", "16C7e42F292c6912E7710c838347Ae178B4a2f9"),
    "ghs": ("ghs_" + "9aaaabbbbccccddddeeeeffffgggghhhhiiiijjj", "9aaaabbbbccccddddeeeeffffgggghhhhiiiijjj"),
    "github_pat": (
        "github_pat_" + "11AAAAAAA0bbbbbbbbbbbb_cccccccccccccccccccccccccccc",
        "11AAAAAAA0bbbbbbbbbbbb_cccccccccccccccccccccccccccc",
    ),
    "glpat": ("glpat-" + "xK9mP2vL8nQ4wR7tY1zB", "xK9mP2vL8nQ4wR7tY1zB"),
    "npm": ("npm_" + "a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6q7r8", "a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6q7r8"),
    "google": ("AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    "stripe": ("sk_live_" + "51HqLyjWDarjtT1zdp7dcXyz", "51HqLyjWDarjtT1zdp7dcXyz"),
    "akia": ("AKIA" + "Z7Q3N5W2X8Y4V6R1", "Z7Q3N5W2X8Y4V6R1"),
    "asia": ("ASIA" + "Q2W3E4R5T6Y7U8I9", "Q2W3E4R5T6Y7U8I9"),
    "aws_secret": (
        "aws_secret_access_key=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
    ),
    "openai_proj": (
        "sk-proj-" + "T3BlbkFJabcdefghijklmnopqrstuv012345",
        "T3BlbkFJabcdefghijklmnopqrstuv012345",
    ),
    "anthropic": (
        "sk-ant-" + "api03-abcdefghijklmnopqrstuvwxyz0123456789",
        "api03-abcdefghijklmnopqrstuvwxyz0123456789",
    ),
    "openai": ("sk-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp", "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1Qq0Pp"),
    "slack_bot": ("xoxb-" + "2048-4096-ABCdefGHIjklMNO", "2048-4096-ABCdefGHIjklMNO"),
    "slack_user": ("xoxp-" + "1111-2222-3333-abcdefabcdef", "1111-2222-3333-abcdefabcdef"),
    "jwt_1": (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkcy1kb2N0b3IifQ.c2lnbmF0dXJlLWJ5dGVzLWhlcmU",
        "c2lnbmF0dXJlLWJ5dGVzLWhlcmU",
    ),
    "jwt_2": (
        "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJub2RlLTcifQ.cnNhLXNpZ25hdHVyZS14eXo",
        "cnNhLXNpZ25hdHVyZS14eXo",
    ),
    "url_https": ("https://alice:Tr0ub4dor3xx@git.example.com/repo.git", "Tr0ub4dor3xx"),
    "url_postgres": ("postgres://admin:pgS3cretPass@db.internal:5432/runs", "pgS3cretPass"),
    "url_redis": ("redis://default:r3disPw0rd9@cache:6379/0", "r3disPw0rd9"),
    "flag_token": ("--token=tkn_5f1e2d3c4b5a69788796", "tkn_5f1e2d3c4b5a69788796"),
    "flag_password": ("--password hunter2hunter2", "hunter2hunter2"),
    "flag_api_key": ("--api-key=ak_live_77ab88cd99ef", "ak_live_77ab88cd99ef"),
    "assign_api_key": ("api_key=wandb_0123456789abcdef0123", "wandb_0123456789abcdef0123"),
    "json_password": ('{"password": "c0rrect-h0rse-battery"}', "c0rrect-h0rse-battery"),
    "rsa_key": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAzQx9planted\n-----END RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEAzQx9planted",
    ),
    "openssh_key": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEplanted\n-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEplanted",
    ),
}

#: Where each goes. env: allowlisted variables (set by the test); argv/paths: the --out directory (set by the test).
IN_ENV = ("hf_1", "akia", "openai_proj", "slack_bot", "url_https")
IN_PATH = ("ghp",)
IN_COMMAND_LINE = ("flag_token", "flag_password", "flag_api_key", "assign_api_key")
IN_EXCEPTION = ("hf_2", "gho", "ghs", "github_pat", "npm", "google", "json_password", "url_postgres")
IN_STDERR = (
    "stripe",
    "asia",
    "aws_secret",
    "anthropic",
    "openai",
    "slack_user",
    "jwt_1",
    "rsa_key",
    "openssh_key",
    "url_redis",
)
IN_NOTE_PATH = ("glpat", "jwt_2")

#: Ordinary values that must come out untouched.
ORDINARY = (
    "/home/alice/.cache/torch_extensions/py311_cpu/cpu_adam",
    "0.19.8",
    "edaa722f1c2b3a4d5e6f7a8b9c0d1e2f3a4b5c6d",
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "--lr 1e-3",
    "zero_optimization",
)


def variants() -> list[Variant]:
    return [Variant("everywhere")]


def run(ctx: ProbeContext) -> None:
    ctx.note(
        "command_line", "python train.py " + " ".join(SECRETS[k][0] for k in IN_COMMAND_LINE) + " --lr 1e-3"
    )
    ctx.note("paths", [f"/data/ckpt/{SECRETS[k][0]}/step_100" for k in IN_NOTE_PATH] + list(ORDINARY[:1]))
    ctx.note("ordinary", list(ORDINARY))
    ctx.enter("leaking")
    print("stderr of a job: " + " | ".join(SECRETS[k][0] for k in IN_STDERR), file=sys.stderr, flush=True)
    raise RuntimeError(
        "could not reach the hub with "
        + " ".join(SECRETS[k][0] for k in IN_EXCEPTION)
        + f" (deepspeed {ORDINARY[1]}, commit {ORDINARY[2]})"
    )

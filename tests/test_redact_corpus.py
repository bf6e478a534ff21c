"""A corpus of secrets in the shapes they take in real logs, environments and command lines (gitleaks' default rules
and detect-secrets' plugins are the anchors), each masked by `scrub_text` and, under its variable's name, by the
environment's redaction; and a corpus of ordinary text that must survive whole, since a masked git sha, path or
count would damage the ticket. Fake values, real shapes: each is built from pieces so that no scanner takes this
file for a leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds_doctor.hardware.env import relevant_variables
from ds_doctor.redact import MASK, is_secret_name, printable, scrub, scrub_text
from tests.bounds import ratio

PW = "Zq7v" + "Xr2L" + "p9Wm"  # a password
TOKEN = "tk" + "A1b2C3d4E5f6G7h8I9j0K1l2"
HEX40 = "3f2c1a9b8e7d6c5b4a39" + "281706f5e4d3c2b1a098"

#: (a line as a log, an environment or a command line shows it, the secret in it)
SECRETS = [
    # short and abbreviated password names
    (f"export DB_PASS={PW}", PW),
    (f"DB_PASS={PW} python train.py", PW),
    (f"SMTP_PASS={PW}", PW),
    (f"PASS={PW}", PW),
    (f"ADMIN_PW={PW}", PW),
    (f"PW={PW}", PW),
    (f"MYSQL_PWD={PW}", PW),
    (f"PGPASSWORD={PW} psql -h db -U runs", PW),
    (f"REDIS_PASSWD={PW}", PW),
    (f"db_pass: {PW}", PW),
    (f"redis-cli -h cache --pass {PW} ping", PW),
    (f"train.py --db-pass={PW} --lr 1e-3", PW),
    (f"user=admin pass={PW}", PW),
    (f"Driver={{ODBC Driver 18}};Server=tcp:db;Uid=sa;PWD={PW};Encrypt=yes", PW),
    (f"Server=db;Database=runs;User Id=sa;Pwd={PW};", PW),
    (f"APP_SECRET={PW}", PW),
    (f"JWT_SECRET={PW}", PW),
    (f"SESSION_TOKEN={TOKEN}", TOKEN),
    (f"GH_TOKEN={TOKEN}", TOKEN),
    (f"APIKEY={TOKEN}", TOKEN),
    (f"AUTH={TOKEN}", TOKEN),
    (f"Cookie: session={TOKEN}", TOKEN),
    # credentials in URLs, of every shape
    (f"postgresql+psycopg2://runs:{PW}@db.internal:5432/runs", PW),
    (f"mongodb+srv://runs:{PW}@cluster0.mongodb.net/db?retryWrites=true", PW),
    (f"amqp://runs:{PW}@rabbit:5672//", PW),
    (f"redis://:{PW}@[::1]:6379/0", PW),
    (f"redis://default:{PW}@[2001:db8::1]:6379", PW),
    (f"https://runs:p%40{PW}@pypi.internal/simple", PW),
    (f"https://runs:p@{PW}@pypi.internal/simple", PW),
    (f"https://runs:a:{PW}@pypi.internal/simple", PW),
    (f"pip install --extra-index-url https://__token__:{PW}@pypi.internal/simple/ ds", PW),
    (f"git clone https://oauth2:{TOKEN}@gitlab.example.com/team/repo.git", TOKEN),
    (f"git clone https://{HEX40}@github.com/org/repo.git", HEX40),
    (f"HTTPS_PROXY=runs:{PW}@proxy.corp:3128", PW),
    (f"--proxy runs:{PW}@10.0.0.1:3128", PW),
    (f"curl -u runs:{PW} https://artifacts.internal/x.bin", PW),
    (f"curl --user=runs:{PW} https://artifacts.internal/x.bin", PW),
    # secrets in a URL's query
    (f"GET https://api.example.com/v1/x?token={TOKEN}&page=2", TOKEN),
    (f"https://api.example.com/v1/x?page=2&access_token={TOKEN}", TOKEN),
    (f"https://acct.blob.core.windows.net/c/f?sv=2021-06-08&sig={TOKEN}", TOKEN),
    (f"s3://b/k?X-Amz-Date=20260101T000000Z&X-Amz-Signature={HEX40}", HEX40),
    (f"https://maps.example.com/api?key={TOKEN}", TOKEN),
    (f"https://app.example.com/callback?state=x&code={TOKEN}", TOKEN),
    (f"https://db.example.com/login?user=runs&password={PW}", PW),
    # token shapes
    ("ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"),
    ("cloning with gho_" + "B1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "B1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"),
    ("ghs_" + "C1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", "C1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"),
    ("github_pat_" + "11ABCDEFG0_" + "abcdefghijklmnopqrstuv", "abcdefghijklmnopqrstuv"),
    ("glpat-" + "xK9mP2vL8nQ4wR7tY1zB", "xK9mP2vL8nQ4wR7tY1zB"),
    ("xoxb-" + "123456789012-abcdefghijKL", "123456789012-abcdefghijKL"),
    ("AWS_ACCESS_KEY_ID=AKIA" + "Q2W3E4R5T6Y7U8I9", "Q2W3E4R5T6Y7U8I9"),
    ("aws_secret_access_key = " + "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY", "bPxRfiCYEXAMPLEKEY"),
    ("AIza" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY", "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"),
    (
        "openai.OpenAI(api_key='sk-" + "proj-abcdefghijklmnopqrstuvwxyz0123')",
        "abcdefghijklmnopqrstuvwxyz0123",
    ),
    ("sk-" + "ant-api03-abcdefghijklmnopqrstuvwxyz01", "abcdefghijklmnopqrstuvwxyz01"),
    ("HF_TOKEN=hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7", "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7"),
    ("sk_" + "live_51HqLyjWDarjtT1zdp7dcXyz", "51HqLyjWDarjtT1zdp7dcXyz"),
    ("rk_" + "live_51HqLyjWDarjtT1zdp7dcXyz", "51HqLyjWDarjtT1zdp7dcXyz"),
    (
        "//registry.npmjs.org/:_authToken=npm_" + "a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6q7r8",
        "a1b2c3d4e5f6g7h8i9j0",
    ),
    ("password = pypi-" + "AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejAx", "AgEIcHlwaS5vcmc"),
    (f"WANDB_API_KEY={HEX40} python train.py", HEX40),
    (f"Authorization: Bearer {TOKEN}", TOKEN),
    ("Authorization: Basic " + "cnVuczpaeTd2WHIyTHA5V20=", "cnVuczpaeTd2WHIyTHA5V20="),
    (
        "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ),
    ("AccountName=acct;AccountKey=" + "A1b2" * 21 + "==;EndpointSuffix=core.windows.net", "A1b2" * 21),
    (
        "-----BEGIN OPENSSH "
        + "PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU\n-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU",
    ),
]

#: Environment variables whose name says secret: masked whatever the value (`relevant_variables`, `scrub`).
SECRET_VARIABLES = [
    "DS_DB_PASS",
    "DS_PASS",
    "DS_PW",
    "DS_ADMIN_PW",
    "DS_PGPASSWORD",
    "DS_MYSQL_PWD",
    "DS_REDIS_PASSWD",
    "DS_APP_SECRET",
    "DS_HUB_TOKEN",
    "DS_SOME_KEY",
    "DS_APIKEY",
    "DS_AUTH",
    "DS_CREDENTIALS",
    "DS_COOKIE",
]

#: Text that must survive whole: a masked sha, path, count or version would damage the ticket.
ORDINARY = [
    "PWD=/home/alice/project",
    "OLDPWD=/home/alice",
    "PWD=~/runs",
    f"commit {HEX40} (HEAD -> main)",
    "run 123e4567-e89b-12d3-a456-426614174000 on GPU-3f2a1b4c-5d6e-7f80-9a1b-2c3d4e5f6a7b",
    "reading shards from /data/keys/shard-00001.tar",
    "tokenizer: LlamaTokenizerFast(name_or_path='meta-llama/Llama-3-8B')",
    "generate(max_tokens=5, pad_token=<pad>)",
    "KEYBOARD=us",
    "NCCL_SOCKET_IFNAME=eth0",
    "downloading https://download.pytorch.org/whl/cu121/torch-2.3.1%2Bcu121-cp311-linux_x86_64.whl",
    "torch 2.3.1+cu121, deepspeed 0.14.4, nccl 2.21.5",
    "pass: 3, fail: 1, passed: 4",
    "PASS: 12",
    "forward_pass: 1234.5678ms backward_pass: 2345.6789ms",
    "first_pass=12345678",
    "pw_conv: Conv2d(64, 64, kernel_size=(1, 1))",
    "conv_pw=depthwise_separable_block",
    "pass_rate=0.98",
    "train.py --pass-through --lr 1e-3",
    "docker run -u 1000:1000 nvcr.io/nvidia/pytorch:24.01-py3",
    "docker pull python:3.11@sha256:" + "ab" * 32,
    "git+https://github.com/org/repo@v1.0",
    "ssh://git@github.com/org/repo.git and git@github.com:org/repo.git",
    "mailto:alice@example.com",
    "scp alice@node-2:/data/ckpt .",
    "python -u train.py --sort-key name",
    "https://huggingface.co/api/models?search=llama&sort=downloads",
    "http://[::1]:8080/metrics",
    "Rank 0: Completed store-based barrier for key:store_based_barrier_key:1 with 2 nodes.",
    "sort_key=lambda x: x",
    "conda install -c conda-forge conda-forge::numpy@1.26",
]


@pytest.mark.parametrize(("line", "secret"), SECRETS, ids=[line[:40] for line, _ in SECRETS])
def test_each_secret_of_the_corpus_is_masked_and_its_context_kept(line: str, secret: str) -> None:
    out = scrub_text(line)
    assert secret not in out and MASK in out, out
    assert scrub_text(out) == out  # scrubbed again (recover), it stays


@pytest.mark.parametrize("name", SECRET_VARIABLES)
def test_a_variable_whose_name_says_secret_is_masked_by_the_environments_redaction(name: str) -> None:
    environ = {name: PW, "NCCL_SOCKET_IFNAME": "eth0", "PWD": "/home/alice"}
    assert relevant_variables(environ) == {name: MASK, "NCCL_SOCKET_IFNAME": "eth0"}
    assert scrub(environ) == {name: MASK, "NCCL_SOCKET_IFNAME": "eth0", "PWD": "/home/alice"}
    if not name.endswith("_SOME_KEY"):  # in text, `SHAPE_KEY=` is a constant's name (test_redact.py)
        assert scrub_text(f"{name}={PW}") == f"{name}={MASK}"


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_of_the_corpus_survives(text: str) -> None:
    assert scrub_text(text) == text


def test_the_shells_pwd_is_the_working_directory_and_odbcs_pwd_a_password() -> None:
    """Decided by the name exactly (`PWD`, in capitals) and its value: an absolute path is the working directory."""
    assert not is_secret_name("PWD") and not is_secret_name("PWD", "/home/alice")
    assert is_secret_name("PWD", PW) and is_secret_name("MYSQL_PWD") and is_secret_name("pwd")
    assert scrub({"PWD": "/home/alice", "OLDPWD": "/tmp"}) == {"PWD": "/home/alice", "OLDPWD": "/tmp"}
    assert scrub({"PWD": PW, "MYSQL_PWD": "/x"}) == {"PWD": MASK, "MYSQL_PWD": MASK}


def test_short_names_are_judged_by_the_word_before_them() -> None:
    assert all(is_secret_name(n) for n in ("DB_PASS", "ADMIN_PW", "PASS", "PW", "db_pass", "PGPASSWORD"))
    assert not any(
        is_secret_name(n) for n in ("pass", "forward_pass", "conv_pw", "KEYBOARD", "MONKEY", "BYPASS")
    )


def test_printable_is_what_the_cli_echoes_scrubbed_and_inert() -> None:
    echoed = printable(f"report: /runs/\x1b]0;owned\x07run-1\nhttps://runs:{PW}@pypi.internal/simple")
    assert echoed == f"report: /runs/\\x1b]0;owned\\x07run-1 https://runs:{MASK}@pypi.internal/simple"
    assert printable(None) == "" and printable(Path("/runs/\u202erun")) == "/runs/\\u202erun"


ORDINARY_MB = ((Path(__file__).resolve().parent / "resources" / "redact_ordinary.log").read_text() * 1000)[
    : 10**6
]
#: The new shapes' hostile megabytes, each against an ordinary one: a runaway's ratio is in the hundreds.
HOSTILE = {
    "user_colons": "a:" * (10**6 // 2),
    "user_no_at": "a:bcd" * (10**6 // 5),
    "long_password": "a:" + "b" * 10**6,
    "ats": "a:bcd@" * (10**6 // 6),
    "curl_users": "-u a:" * (10**6 // 5),
    "queries": "&code=x?key=" * (10**6 // 12),
    "short_names": "PW=DB_PASS=pass=" * (10**6 // 16),
    "working_dirs": "PWD=/" * (10**6 // 5),
    "compounds": "PGPASSWORD" * (10**6 // 10),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_the_new_shapes_scrub_a_hostile_megabyte_in_linear_time(name: str) -> None:
    took = ratio(lambda: scrub_text(HOSTILE[name]), lambda: scrub_text(ORDINARY_MB), 10.0)
    assert took <= 10.0, f"{took:.1f}x the time of an ordinary megabyte"

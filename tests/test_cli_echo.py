"""What the CLI echoes back of the user's own arguments (a URL with credentials, a path that looks like a token)
is scrubbed and on one line, in every error and warning: people paste these lines into tickets."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds_doctor.cli import main

SECRETS = ("Sup3rS3cretPw", "hunter2hunter2", "ghp_abcdefghijklmnopqrstuvwxyz0123456789")


@pytest.mark.parametrize(
    "argv",
    [
        ["fleet", "https://alice:Sup3rS3cretPw@example.com/reports"],
        ["report", "{tmp}/ghp_abcdefghijklmnopqrstuvwxyz0123456789.json"],
        [
            "run",
            "--with",
            "deepspeed==0.19.8",
            "--find-links",
            "https://bob:hunter2hunter2@pypi.example.com/simple",
        ],
        [
            "bisect",
            "torch",
            "--good",
            "2.0.0",
            "--bad",
            "2.1.0",
            "--find-links",
            "https://bob:hunter2hunter2@h/x",
        ],
        ["report", "{tmp}/run-\x1b]0;owned\x07\x1b[2J.json"],
    ],
    ids=["fleet-url", "report-path", "run-find-links", "bisect-find-links", "escapes"],
)
def test_an_argument_echoed_in_an_error_keeps_no_secret_and_no_escape(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    code = main([arg.format(tmp=tmp_path) for arg in argv])
    _, stderr = capsys.readouterr()
    assert code == 2, stderr
    assert len(stderr.splitlines()) == 1 and stderr.startswith("ds-doctor: error:"), stderr
    assert not any(secret in stderr for secret in SECRETS), stderr
    assert "\x1b" not in stderr and "\x07" not in stderr, repr(stderr)

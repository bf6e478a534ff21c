"""A `--model` factory is user code: checked in a process of its own, whatever it does at import or when called
(exit, parse the command line, hang, print megabytes) ends as one line and exit 2, naming the stage it reached,
and never reaches ds-doctor's own stdout (issue 21)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.bounds import GENEROUS_S

CONSOLE_SCRIPT = Path(sys.executable).parent / "ds-doctor"

TINY = """
import torch
def make():
    return torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
"""

FACTORIES = {
    "exits": ("import sys\nsys.exit(0)\n" + TINY, "exit code 0 at the stage 'importing user_factory'"),
    "argparse": (
        "import argparse\nparser = argparse.ArgumentParser()\nparser.add_argument('--data', required=True)\n"
        "parser.parse_args()\n" + TINY,
        "exit code 2 at the stage 'importing user_factory'",
    ),
    "hangs": (
        TINY.replace("def make():", "def make():\n    import time; time.sleep(3600)"),
        "did not finish within 8 s, at the stage 'building the model'",
    ),
    "raises": (
        TINY.replace("def make():", "def make():\n    raise RuntimeError('no data at /secret/place')"),
        "RuntimeError: no data at /secret/place",
    ),
}


def ds_doctor_in(folder: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """The console script, as a user runs it from their project folder."""
    return subprocess.run(
        [str(CONSOLE_SCRIPT), *args], cwd=folder, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.skipif(
    not CONSOLE_SCRIPT.exists(), reason="the ds-doctor console script is not installed in this venv"
)
@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_a_misbehaving_factory_is_one_line_exit_2(tmp_path: Path, kind: str) -> None:
    source, needle = FACTORIES[kind]
    (tmp_path / "user_factory.py").write_text(textwrap.dedent(source))
    started = time.monotonic()
    proc = ds_doctor_in(
        tmp_path, "run", "--level", "1", "--timeout", "8", "--out", "out", "--model", "user_factory:make"
    )
    assert proc.returncode == 2, (proc.stdout[-500:], proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ds-doctor: error:") and needle in lines[0], proc.stderr[
        -2000:
    ]
    assert proc.stdout == "" and not (tmp_path / "out").exists()
    assert time.monotonic() - started < GENEROUS_S  # --timeout 8 not applied: the factory's 3600 s


@pytest.mark.skipif(
    not CONSOLE_SCRIPT.exists(), reason="the ds-doctor console script is not installed in this venv"
)
def test_a_factory_that_prints_megabytes_leaves_the_json_stream_clean(tmp_path: Path) -> None:
    (tmp_path / "chatty.py").write_text(textwrap.dedent("print('x' * 10_000_000)\n" + TINY))
    proc = ds_doctor_in(tmp_path, "run", "--level", "1", "--json", "--out", "out", "--model", "chatty:make")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["tool"]["name"] == "ds-doctor"  # stdout is the report, only
    assert len(proc.stdout) < 1_000_000


QUIET_CHECK = """
import sys
from ds_doctor import options
check = options.check_user_setup if sys.argv[2] == "quiet" else options._check_user_setup
check(sys.argv[1], "hf:gpt2", None, None, None)
"""


@pytest.mark.parametrize("mode", ["quiet", "bare"])
def test_checking_the_users_setup_keeps_the_libraries_output_off_the_console(
    tmp_path: Path, mode: str
) -> None:
    """DeepSpeed's config validation logs "Setting accelerator to CPU" and a transformers model's forward logs
    "`loss_type=None` ... unrecognized": in the parent, before ds-doctor's header, they read as the run's own
    output. The bare check shows they still do at these versions (so the quiet one is tested against something)."""
    config = tmp_path / "ds.json"
    config.write_text(
        json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}})
    )
    proc = subprocess.run(
        [sys.executable, "-c", QUIET_CHECK, str(config), mode], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    if mode == "quiet":
        assert output == "", output
    else:
        assert "real_accelerator" in output and "loss_type" in output, output

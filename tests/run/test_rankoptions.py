"""The run options: one value from the command line to every rank, never through the parent's environment."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from ds_doctor.cli import main
from ds_doctor.probe import registry
from ds_doctor.probe.rankoptions import DEFAULTS, FILE_NAME, RankOptions, RankOptionsError
from ds_doctor.run.command import rank_environment
from ds_doctor.rundir import LaunchDir

ROOT = Path(__file__).resolve().parents[2]
#: Modules that run on a rank, where the environment is the rank's own (torch reads its settings from there).
#: code that runs in a process of its own that the parent started (a rank, the op build process)
RANK_SIDE = {"doctor/run/worker.py", "doctor/forensics/capture.py", "doctor/ops/child.py"}
#: What the libraries the parent imports set on import (deepspeed/__init__.py, to check the user's config).
LIBRARIES_SET = {"PYTORCH_NVML_BASED_CUDA_CHECK"}


def a_deepspeed_config(folder: Path) -> Path:
    path = folder / "ds.json"
    path.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": 1,
                "zero_optimization": {"stage": 2},
                "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
            }
        )
    )
    return path


def test_the_options_round_trip_and_refuse_what_ds_doctor_did_not_write(tmp_path: Path) -> None:
    options = RankOptions(
        deepspeed_config="/x/ds.json",
        model="hf:qwen3",
        freeze="model.*",
        suspect_below=0.25,
        shared_gpu="gloo",
        node_rank=1,
        nnodes=2,
    )
    assert RankOptions.from_json(options.to_json()) == options
    options.write(tmp_path)
    assert RankOptions.read(tmp_path) == options and (tmp_path / FILE_NAME).is_file()
    assert RankOptions.read(tmp_path / "none") == DEFAULTS  # a launch directory from before the options
    for text, words in (
        ("[1]", "not a JSON object"),
        ('{"model": 3}', "model is int"),
        ('{"suspect_below": true}', "suspect_below is bool"),
        ('{"secret": "x"}', "secret"),
        ("{", "not JSON"),
    ):
        with pytest.raises(RankOptionsError, match=words):
            RankOptions.from_json(text)


def test_an_overlay_is_in_the_ranks_environment_not_the_parents(tmp_path: Path) -> None:
    before = dict(os.environ)
    env = rank_environment(DEFAULTS.with_overlay(tmp_path / "stack"), launch_dir=tmp_path / "launch")
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path / "stack")
    assert env["TORCH_EXTENSIONS_DIR"] == str(tmp_path / "stack" / "torch_extensions")
    assert env["TORCH_FR_DUMP_TEMP_FILE"].startswith(str(tmp_path / "launch"))
    assert "TORCH_EXTENSIONS_DIR" not in rank_environment(DEFAULTS) or os.environ.get("TORCH_EXTENSIONS_DIR")
    assert dict(os.environ) == before


def test_a_rank_resolves_its_cases_from_the_launch_files_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's config reaches the rank in options.json: the case it adds is found, with the config as its params,
    whatever the rank's environment holds."""
    from ds_doctor.usersetup.deepspeed_config import UserConfig, load

    config = load(str(a_deepspeed_config(tmp_path)))
    case = next(
        c
        for c in registry.all_cases(options=RankOptions(deepspeed_config=config.path))
        if c.id == "zero_offload[user-config-ws2]"
    )
    launch = LaunchDir(tmp_path / "ws2-cpu-0")
    launch.write_cases([case.id], [registry.CaseEntry.of(case).to_dict()])
    RankOptions(deepspeed_config=config.path).write(launch.path)
    for name in [n for n in os.environ if n.startswith("DS_DOCTOR_")]:
        monkeypatch.delenv(name)
    (entry,) = launch.read_entries()
    found = registry.resolve(registry.CaseEntry.from_dict(entry), RankOptions.read(launch.path))
    assert found.id == case.id and isinstance(found.params, UserConfig) and found.params.path == config.path
    # without the options the case is not there
    with pytest.raises(KeyError, match="no variant 'user-config'"):
        registry.resolve(registry.CaseEntry.from_dict(entry), DEFAULTS)


def test_two_runs_in_one_process_leave_the_environment_and_each_other_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first run's --deepspeed-config adds its cases to that run only; the environment is the same after both."""
    before = dict(os.environ)
    config = a_deepspeed_config(tmp_path)
    first = main(
        [
            "run",
            "--level",
            "1",
            "--deepspeed-config",
            str(config),
            "-k",
            "user-config",
            "--out",
            str(tmp_path / "first"),
        ]
    )
    assert first == 0, capsys.readouterr().err
    second = main(["run", "--level", "1", "-k", "user-config", "--out", str(tmp_path / "second")])
    err = capsys.readouterr().err
    # the first run's config did not stay behind
    assert second == 2 and "'user-config' selects no case" in err
    changed = {name for name in {*before, *os.environ} if before.get(name) != os.environ.get(name)}
    assert changed <= LIBRARIES_SET, changed


def _assigns_environ(node: ast.AST) -> bool:
    """`os.environ[...] = ...`, `os.environ.update(...)`, `.setdefault`, `.pop` and the like."""

    def is_environ(value: ast.AST) -> bool:
        return isinstance(value, ast.Attribute) and value.attr == "environ"

    if isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Subscript) and is_environ(t.value) for t in targets)
    if isinstance(node, ast.Delete):
        return any(isinstance(t, ast.Subscript) and is_environ(t.value) for t in node.targets)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and is_environ(node.func.value)
        and node.func.attr in {"update", "setdefault", "pop", "popitem", "clear"}
    )


def test_the_parent_never_assigns_to_its_environment() -> None:
    """Options travel in the launch directory: only code that runs on a rank may set the rank's own variables."""
    offenders = []
    for path in sorted([*ROOT.glob("doctor/**/*.py"), *ROOT.glob("reports/**/*.py")]):
        relative = path.relative_to(ROOT).as_posix()
        if relative in RANK_SIDE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [f"{relative}:{node.lineno}" for node in ast.walk(tree) if _assigns_environ(node)]
    assert offenders == []

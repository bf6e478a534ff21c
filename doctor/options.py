"""The checks behind the CLI's options: each turns input that cannot work into one line on stderr and exit code 2
(`click.BadParameter` / `click.UsageError`), before anything runs or is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from reports.records import Report


def check_writable_file(path: Path | None, option: str) -> None:
    """An output file's directory must exist and be writable, and the path must not be a directory."""
    if path is None:
        return
    if path.is_dir():
        raise click.BadParameter(f"{path} is a directory", param_hint=option)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise click.BadParameter(f"cannot write {path}: {parent} is not a writable directory", param_hint=option)


def writable_dir(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise click.BadParameter(f"{path} exists and is not a directory", param_hint="--out")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.BadParameter(f"cannot create {path}: {exc.strerror}", param_hint="--out") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise click.BadParameter(f"{path} is not writable", param_hint="--out")
    return path


def load_report(path: Path, hint: str) -> Report:
    """A report JSON for diffing; anything else is a usage error naming the option or argument."""
    from doctor.run.recover import InputError, load_report_file

    if path.is_dir():
        raise click.BadParameter(f"{path} is a directory; give a report JSON (ds-doctor-*.json)", param_hint=hint)
    if not path.exists():
        raise click.BadParameter(f"{path}: no such file", param_hint=hint)
    try:
        return load_report_file(path)
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None


def check_selection(level: int, keyword: str | None, nproc: int | None = None, cluster: Any = None) -> None:
    """A `-k` that parses and selects something: a probe case (across the nodes too, in a multi-node run) or a GPU
    health result of this node."""
    from doctor.checks.health import PROBE as HEALTH
    from doctor.run import registry
    from doctor.run.plan import (
        KeywordError,
        compile_keyword,
        default_nproc,
        detect_hardware,
        node_world_size,
        select_cases,
    )

    if keyword is None:
        return
    try:
        matcher = compile_keyword(keyword)
    except KeywordError as exc:
        raise click.BadParameter(str(exc), param_hint="-k") from None
    hardware = detect_hardware()
    # on a GPU node the hardware families also have cases at its world size (`-k "comm and ws8"`)
    across = (cluster.nnodes, nproc or default_nproc(hardware)) if cluster is not None else None
    cases = registry.all_cases(node_world_size(hardware, nproc), across)
    health = any(matcher(f"{HEALTH}[gpu{index}]") for index in range(hardware.gpu_count))
    if not health and not select_cases(cases, level=3, keyword=keyword):
        names = ", ".join([spec.name for spec in registry.specs()] + ([HEALTH] if hardware.gpu_count else []))
        raise click.BadParameter(f"{keyword!r} selects no case; probe families: {names} (see `ds-doctor list`)",
                                 param_hint="-k")
    if level >= 2 and not health and not select_cases(cases, level=level, keyword=keyword):
        raise click.BadParameter(f"{keyword!r} selects only level-3 cases; add --level 3", param_hint="-k")


def check_nproc(nproc: int | None, level: int) -> None:
    from doctor.run.plan import detect_hardware

    if nproc is not None and level >= 2:
        hardware = detect_hardware()
        if hardware.device_kind == "cuda" and nproc > hardware.gpu_count:
            raise click.BadParameter(f"{nproc} ranks but only {hardware.gpu_count} GPU(s) visible", param_hint="--nproc")


def cluster_from(nnodes: int | None, node_rank: int | None, endpoint: str | None, rdzv_id: str | None,
                 join_timeout_s: float) -> Any:
    """The nodes of the run from the options, or from srun's SLURM_* variables; None on one node."""
    from doctor.cluster.nodes import ClusterError, from_options

    try:
        return from_options(nnodes, node_rank, endpoint, rdzv_id, join_timeout_s, os.environ)
    except ClusterError as exc:
        raise click.UsageError(str(exc)) from None


def use_user_setup(ds_config: str | None, model_spec: str | None, acc_config: str | None = None,
                   freeze: str | None = None) -> None:
    """Check `--deepspeed-config`, `--accelerate-config` and `--model` (DeepSpeed's own validation; the YAML's
    fields; one forward of the model on the CPU) and hand them to the ranks through the environment."""
    import os

    from doctor.usersetup import accelerate_config, deepspeed_config
    from doctor.usersetup import model as user_model

    if acc_config is not None:
        try:
            setup = accelerate_config.load(acc_config)
        except accelerate_config.AccelerateConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--accelerate-config") from None
        os.environ[accelerate_config.ENV] = setup.path

    if ds_config is not None:
        try:
            user = deepspeed_config.load(ds_config)
            deepspeed_config.check(user)
        except deepspeed_config.ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--deepspeed-config") from None
        os.environ[deepspeed_config.ENV] = user.path
    if freeze is not None and model_spec is None:
        raise click.BadParameter("--freeze names a part of your model: give --model too", param_hint="--freeze")
    if model_spec is not None:
        try:
            spec = user_model.check(model_spec, freeze)
        except user_model.ModelSpecError as exc:
            raise click.BadParameter(str(exc), param_hint="--model") from None
        os.environ[user_model.ENV] = spec.text
        if freeze is not None:
            os.environ[user_model.FREEZE_ENV] = freeze

"""The checks behind the CLI's options: each turns input that cannot work into one line on stderr and exit code 2
(`click.BadParameter` / `click.UsageError`), before anything runs or is written."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import socket
import threading
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import click

from ds_doctor.cluster.nodes import MAX_NODES
from ds_doctor.files import foreign_in_path, foreign_link, output_kind
from ds_doctor.probe.rankoptions import RankOptions
from ds_doctor.redact import PRINTABLE_CHARS
from ds_doctor.reports.model import Report
from ds_doctor.userinput import MAX_RANKS

#: One line on stderr: a usage error quoting a 100 KB option, or one holding escape sequences, stays one short line.
ONE_LINE_CHARS = PRINTABLE_CHARS


def one_line(text: str, limit: int = ONE_LINE_CHARS) -> str:
    """A message for stderr: secrets scrubbed, control characters shown escaped, on one line, at most `limit`
    characters (`ds_doctor.redact.printable`)."""
    from ds_doctor.redact import printable

    return printable(text, limit)


class FiniteFloatRange(click.FloatRange):
    """A FloatRange that refuses nan and inf: `nan` passes click's range check (every comparison with it is false)
    and `--timeout nan` switched the hang guard off."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


#: Bounds on what the command line may ask for, checked before anything is allocated or launched.
MAX_SECONDS = 7 * 24 * 3600.0  # a timeout past a week is a typo, and time APIs overflow on 1e308
MAX_NPROC = 1024  # ranks on one node (GPU nodes carry 8-16; a CPU run of more is a mistake)
MAX_WORLD_SIZE = MAX_RANKS  # ranks of a job named to `triage`: as many as any input may claim

SECONDS = FiniteFloatRange(min=0, min_open=True, max=MAX_SECONDS)
#: --tolerance: percent, 0 <= t < 100 (100 % would accept a bandwidth of zero)
TOLERANCE = FiniteFloatRange(min=0, max=100, max_open=True)
FRACTION = FiniteFloatRange(min=0, max=1, min_open=True)
NPROC = click.IntRange(min=1, max=MAX_NPROC)
NNODES = click.IntRange(min=1, max=MAX_NODES)
NODE_RANK = click.IntRange(min=0, max=MAX_NODES - 1)
WORLD_SIZE = click.IntRange(min=1, max=MAX_WORLD_SIZE)


def output_in(path: Path | None, name: str) -> Path | None:
    """`--out` of `diff` and `fleet`: a file, or, as for `run` and `report`, a folder it goes into as `name`."""
    return path / name if path is not None and path.is_dir() else path


def check_writable_file(path: Path | None, option: str) -> None:
    """An output file: a regular file (or none yet) in a writable directory, or a stream written in place
    (`/dev/null`, `/dev/stdout`, a FIFO); a directory, a socket or a block device is refused."""
    if path is None:
        return
    kind = output_kind(path)
    if kind == "stream":
        return
    if kind != "file":
        raise click.BadParameter(f"{path} {kind}", param_hint=option)
    # another user's link is replaced where it is (`ds_doctor.files.write_output`), never followed
    real = path if foreign_link(path) is not None else Path(os.path.realpath(path))
    parent = real.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise click.BadParameter(
            f"cannot write {path}: {parent} is not a writable directory", param_hint=option
        )


def _identity(path: Path) -> tuple[str, tuple[int, int] | None]:
    """The resolved path, and (device, inode) where the file exists: two spellings, hard links and symlinks of one
    file compare equal."""
    try:
        info = os.stat(path)
        return os.path.realpath(path), (info.st_dev, info.st_ino)
    except OSError:
        return os.path.realpath(path), None


def check_distinct(outputs: Mapping[str, Path | None], inputs: Mapping[str, Path | str | None]) -> None:
    """No output is also an input, or another output: `diff A B --out A` and `--junit X --prometheus X` would
    overwrite a file without a word. A character device (`/dev/null`) may take several outputs."""
    given_out = [(name, Path(p)) for name, p in outputs.items() if p is not None]
    given_in = [(name, Path(p)) for name, p in inputs.items() if p is not None and str(p) != "-"]
    seen: list[tuple[str, tuple[str, tuple[int, int] | None]]] = [(n, _identity(p)) for n, p in given_in]
    for name, path in given_out:
        if _is_char_device(path):
            continue
        ident = _identity(path)
        for other, other_ident in seen:
            if ident[0] == other_ident[0] or (ident[1] is not None and ident[1] == other_ident[1]):
                role = "an input" if other in dict(given_in) else "another output"
                raise click.BadParameter(
                    f"{path} is also {other} ({role}): it would be overwritten", param_hint=name
                )
        seen.append((name, ident))


def _is_char_device(path: Path) -> bool:
    import stat

    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


#: names that say "a file": `run --out` and `report --out` name the folder the reports go into
FILE_SUFFIXES = (".json", ".md", ".html", ".xml", ".prom", ".txt")


def writable_dir(path: Path, hint: str = "--out") -> Path:
    """`--out` of `run` and `report`: the folder the reports go into (they are named by host and time). Created
    where missing; a path that names a file (`report.md`) is refused rather than made a folder of that name."""
    found = foreign_in_path(path)
    if found is not None:
        raise click.BadParameter(
            f"{path}: {found[0]} is a link owned by another user (uid {found[1]}), which ds-doctor does not "
            "follow: name a folder that is yours",
            param_hint=hint,
        )
    if path.exists() and not path.is_dir():
        raise click.BadParameter(f"{path} exists and is not a directory", param_hint=hint)
    if not path.exists() and path.suffix.lower() in FILE_SUFFIXES:
        raise click.BadParameter(
            f"{path} looks like a file name; {hint} is the folder the reports are written into "
            f"(named by host and time): give {path.parent}",
            param_hint=hint,
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.BadParameter(f"cannot create {path}: {exc.strerror}", param_hint=hint) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise click.BadParameter(f"{path} is not writable", param_hint=hint)
    return path


def load_report(path: Path, hint: str) -> Report:
    """A report JSON for diffing; anything else is a usage error naming the option or argument."""
    from ds_doctor.run.recover import InputError, load_report_file

    if path.is_dir():
        raise click.BadParameter(
            f"{path} is a directory; give a report JSON (ds-doctor-*.json)", param_hint=hint
        )
    if not path.exists():
        raise click.BadParameter(f"{path}: no such file", param_hint=hint)
    try:
        return load_report_file(
            path, summary=True
        )  # what a diff reads: outcomes, findings, measures, versions
    except InputError as exc:
        raise click.BadParameter(str(exc), param_hint=hint) from None


def check_selection(
    level: int,
    keyword: str | None,
    nproc: int | None = None,
    cluster: Any = None,
    options: RankOptions | None = None,
) -> None:
    """A `-k` that parses and selects something: a probe case (across the nodes too, in a multi-node run, and those
    the run's `options` add) or a GPU health result of this node."""
    from ds_doctor.checks.health import PROBE as HEALTH
    from ds_doctor.probe import registry
    from ds_doctor.run.plan import (
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
    cases = registry.all_cases(node_world_size(hardware, nproc), across, options)
    health = any(matcher(f"{HEALTH}[gpu{index}]") for index in range(hardware.gpu_count))
    if not health and not select_cases(cases, level=3, keyword=keyword):
        names = ", ".join([spec.name for spec in registry.specs()] + ([HEALTH] if hardware.gpu_count else []))
        raise click.BadParameter(
            f"{keyword!r} selects no case; probe families: {names} (see `ds-doctor list`)", param_hint="-k"
        )
    if level >= 2 and not health and not select_cases(cases, level=level, keyword=keyword):
        raise click.BadParameter(f"{keyword!r} selects only level-3 cases; add --level 3", param_hint="-k")


#: More ranks than GPUs share them (ds_doctor.run.plan.shared_gpu); beyond this many to one GPU, a typo is likelier.
MAX_RANKS_PER_GPU = 4


def check_nproc(nproc: int | None, level: int) -> None:
    from ds_doctor.run.plan import detect_hardware

    if nproc is not None and level >= 2:
        hardware = detect_hardware()
        if hardware.device_kind == "cuda" and nproc > MAX_RANKS_PER_GPU * hardware.gpu_count:
            raise click.BadParameter(
                f"{nproc} ranks but only {hardware.gpu_count} GPU(s) visible (ranks share a GPU, "
                f"at most {MAX_RANKS_PER_GPU} to one)",
                param_hint="--nproc",
            )


def cluster_from(
    nnodes: int | None,
    node_rank: int | None,
    endpoint: str | None,
    rdzv_id: str | None,
    join_timeout_s: float,
) -> Any:
    """The nodes of the run from the options, or from srun's SLURM_* variables; None on one node."""
    from ds_doctor.cluster.nodes import ClusterError, from_options

    try:
        cluster = from_options(nnodes, node_rank, endpoint, rdzv_id, join_timeout_s, os.environ)
    except ClusterError as exc:
        raise click.UsageError(str(exc)) from None
    if cluster is not None and (why := unresolved(cluster.host, cluster.port)):
        raise click.BadParameter(f"{cluster.endpoint}: {why}", param_hint="--rdzv-endpoint")
    return cluster


#: How long a rendezvous host may take to resolve: a name that does not resolve is a usage error within seconds
#: (it waited the whole join timeout, then ended in exit 3), and a slow resolver is not a reason to wait longer.
RESOLVE_BOUND_S = 10.0


def unresolved(host: str, port: int, bound_s: float = RESOLVE_BOUND_S) -> str | None:
    """Why `host` cannot be the rendezvous endpoint (it does not resolve, or not within `bound_s`), else None."""
    outcome: list[str | None] = []

    def resolve() -> None:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            outcome.append(None)
        except (OSError, UnicodeError) as exc:
            outcome.append(f"the host {host!r} does not resolve ({getattr(exc, 'strerror', None) or exc})")

    worker = threading.Thread(target=resolve, name="ds-doctor-resolve", daemon=True)
    worker.start()
    worker.join(bound_s)
    return outcome[0] if outcome else f"the host {host!r} did not resolve within {bound_s:.0f} s"


def check_user_setup(
    ds_config: str | None,
    model_spec: str | None,
    acc_config: str | None = None,
    freeze: str | None = None,
    timeout_s: float | None = None,
) -> RankOptions:
    """Check `--deepspeed-config`, `--accelerate-config` and `--model` (DeepSpeed's own validation; the YAML's
    fields; one forward of the model on the CPU): the run options that carry them to the ranks."""
    with libraries_quiet():
        return _check_user_setup(ds_config, model_spec, acc_config, freeze, timeout_s)


def checked_user_setup(options: RankOptions, timeout_s: float | None) -> RankOptions:
    """The ranks' options with the user's setup they name checked (`check_user_setup`): the kept copies of the
    configs, the model's spec as checked."""
    user = check_user_setup(
        options.deepspeed_config, options.model, options.accelerate_config, options.freeze, timeout_s
    )
    return dataclasses.replace(
        options,
        deepspeed_config=user.deepspeed_config,
        accelerate_config=user.accelerate_config,
        model=user.model,
    )


@contextlib.contextmanager
def libraries_quiet() -> Iterator[None]:
    """While the parent checks the user's input with the libraries' own code (DeepSpeed's config validation, a
    transformers model's forward), what they log or warn (DeepSpeed's `real_accelerator` "Setting accelerator to
    CPU", transformers' "`loss_type=None` ... unrecognized") is theirs, not the run's: kept off the console, which
    starts with ds-doctor's header. Their errors still raise, and become one line."""
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(before)


def _check_user_setup(
    ds_config: str | None,
    model_spec: str | None,
    acc_config: str | None,
    freeze: str | None,
    timeout_s: float | None,
) -> RankOptions:
    from ds_doctor.usersetup import accelerate_config, deepspeed_config, model_check
    from ds_doctor.usersetup import model as user_model

    acc_path = ds_path = model_text = None
    if acc_config is not None:
        try:
            acc_path = accelerate_config.load(acc_config).path
        except accelerate_config.AccelerateConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--accelerate-config") from None
    if ds_config is not None:
        try:
            user = deepspeed_config.load(ds_config)
            deepspeed_config.check(user)
        except deepspeed_config.ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--deepspeed-config") from None
        ds_path = user.path
    if freeze is not None and model_spec is None:
        raise click.BadParameter(
            "--freeze names a part of your model: give --model too", param_hint="--freeze"
        )
    if model_spec is not None:
        try:
            model_text = model_check.check_in_child(model_spec, freeze, timeout_s).text
        except user_model.ModelSpecError as exc:
            raise click.BadParameter(str(exc), param_hint="--model") from None
    return RankOptions(deepspeed_config=ds_path, accelerate_config=acc_path, model=model_text, freeze=freeze)

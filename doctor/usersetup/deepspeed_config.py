"""The user's DeepSpeed config (`ds-doctor run --deepspeed-config FILE`), made runnable here and nothing more.

`load` reads and parses it with the bounds of `ds_doctor.userinput` (a bad file is one line: path, or line and column;
a section such as `optimizer` that is not an object, too), `check` runs DeepSpeed's own validation on it, `fill`
makes it run on this node at this world size: HF-style `"auto"` values get values for
the tiny model (as the HF Trainer fills them from its arguments), and what cannot run here is changed, each
change listed with its reason (an NVMe offload path that does not exist becomes a CPU offload *and a finding*,
never a silent switch). The ZeRO promise the invariants check is read from the filled config.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from ds_doctor.reports.model import Finding, Severity
from ds_doctor.userinput import (
    MAX_CONFIG_BYTES,
    Input,
    UserInputError,
    keep_copy,
    parse_json,
    read_file,
    short,
)

MICRO_BATCH = 2
ACCUMULATION = 4
HIDDEN = 32  # the tiny models' hidden size, for the bucket sizes HF derives from it


class ConfigError(UserInputError):
    """A config that cannot be used; its message is the one line the CLI prints (a ValueError, and a
    click.UsageError: exit code 2 wherever it is raised)."""


@dataclasses.dataclass(frozen=True)
class UserConfig:
    path: str
    sha256: str
    text: str  # the file as read: the case carries it, every rank parses the same bytes

    @property
    def config(self) -> dict[str, Any]:
        return dict(json.loads(self.text))


def read_user_file(path: str | Path, error: type[UserInputError], suffix: str = "") -> tuple[Path, bytes]:
    """A config file an option names, read with the bounds of `ds_doctor.userinput` (MAX_CONFIG_BYTES; a FIFO or a
    `<(cmd)` path is read as a stream); `error` with one line when it cannot be. The path returned is one the ranks
    can read again (`kept_path`)."""
    read = read_file(path, limit=MAX_CONFIG_BYTES, error=error, kind="config")
    return kept_path(read, path, suffix), read.data


def kept_path(read: Input, path: str | Path, suffix: str = "") -> Path:
    """Where the ranks read the config again: the file itself, resolved; for a stream (a pipe gives its bytes once)
    a private copy of what it gave. Called once the config checked out, so a refused one leaves no copy."""
    if read.regular:
        return Path(path).expanduser().resolve()
    return keep_copy(read, suffix or Path(str(path)).suffix)


#: sections `fill` and `check` look into: each, where present, is a JSON object
_SECTIONS = (
    ("optimizer",),
    ("optimizer", "params"),
    ("scheduler",),
    ("scheduler", "params"),
    ("zero_optimization",),
    ("zero_optimization", "offload_optimizer"),
    ("zero_optimization", "offload_param"),
    ("bf16",),
    ("fp16",),
)


def _check_shape(config: dict[str, Any], name: str) -> None:
    for *parents, last in _SECTIONS:  # parents first: a parent that is no object was refused already
        parent = _section(config, *parents)
        if last in parent and not isinstance(parent[last], dict):
            raise ConfigError(
                f'{name}: "{".".join((*parents, last))}" is {short(parent[last])}, not a JSON object '
                "of settings"
            )


def load(path: str | Path) -> UserConfig:
    name = str(path)
    read = read_file(path, limit=MAX_CONFIG_BYTES, error=ConfigError, kind="config")
    text = read.text(ConfigError)
    config = parse_json(text, name, ConfigError)
    if not isinstance(config, dict):
        raise ConfigError(f"{name}: a DeepSpeed config is a JSON object, not {type(config).__name__}")
    _check_shape(config, name)
    return UserConfig(str(kept_path(read, path, ".json")), hashlib.sha256(read.data).hexdigest(), text)


@functools.lru_cache(maxsize=4)
def load_once(path: str) -> UserConfig:
    """The config `--deepspeed-config` named (its kept copy, from the run options), read once per process."""
    return load(path)


@dataclasses.dataclass
class Filled:
    config: dict[str, Any]
    filled: dict[str, Any] = dataclasses.field(default_factory=dict)  # "a.b" -> the value put for "auto"
    changed: dict[str, str] = dataclasses.field(default_factory=dict)  # "a.b" -> "old -> new: why"
    # "auto" with no value known: left to DeepSpeed
    unfilled: list[str] = dataclasses.field(default_factory=list)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _section(config: dict[str, Any], *keys: str) -> dict[str, Any]:
    for key in keys:
        inner = config.get(key)
        config = inner if isinstance(inner, dict) else {}
    return config


def _auto_values(config: dict[str, Any], world_size: int) -> dict[str, Any]:
    micro = config.get("train_micro_batch_size_per_gpu")
    micro = micro if isinstance(micro, int) and not isinstance(micro, bool) else MICRO_BATCH
    accumulation = config.get("gradient_accumulation_steps")
    accumulation = (
        accumulation if isinstance(accumulation, int) and not isinstance(accumulation, bool) else ACCUMULATION
    )
    lr = _section(config, "optimizer", "params").get("lr")
    lr = lr if _number(lr) else 3e-4
    return {
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": accumulation,
        "train_batch_size": micro * accumulation * world_size,
        "gradient_clipping": 1.0,
        "optimizer.params.lr": lr,
        "optimizer.params.betas": [0.9, 0.999],
        "optimizer.params.eps": 1e-8,
        "optimizer.params.weight_decay": 0.0,
        "scheduler.params.warmup_min_lr": 0.0,
        "scheduler.params.warmup_max_lr": lr,
        "scheduler.params.warmup_num_steps": 1,
        "scheduler.params.total_num_steps": 10,
        "bf16.enabled": True,
        "fp16.enabled": False,
        "zero_optimization.reduce_bucket_size": HIDDEN * HIDDEN,
        "zero_optimization.stage3_prefetch_bucket_size": int(0.9 * HIDDEN * HIDDEN),
        "zero_optimization.stage3_param_persistence_threshold": 10 * HIDDEN,
    }


def _walk(value: Any, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(key path, value) of every leaf; a path is a tuple, since a key may hold a dot itself."""
    if isinstance(value, dict):
        return [item for key, inner in value.items() for item in _walk(inner, (*prefix, key))]
    return [(prefix, value)]


def _set(config: dict[str, Any], keys: tuple[str, ...], value: Any) -> None:
    *parents, last = keys
    for key in parents:
        config = config[key]
    config[last] = value


def _drop(config: dict[str, Any], keys: tuple[str, ...]) -> None:
    *parents, last = keys
    for key in parents:
        config = config[key]
    config.pop(last, None)


def fill(user: dict[str, Any], world_size: int, accelerator: str, *, fill_auto: bool = True) -> Filled:
    """The config made runnable here; `fill_auto=False` leaves the `"auto"` values to Accelerate, which fills them
    itself when the config goes through it (as the user's job does)."""
    result = Filled(copy.deepcopy(user))
    values = _auto_values(result.config, world_size)
    for keys, value in _walk(result.config):
        if value != "auto" or not fill_auto:
            continue
        dotted = ".".join(keys)
        if dotted in values and len(keys) == len(dotted.split(".")):
            _set(result.config, keys, values[dotted])
            result.filled[dotted] = values[dotted]
        else:
            _drop(result.config, keys)
            result.unfilled.append(dotted)
    _fit_batch(result, world_size)
    for section in ("offload_optimizer", "offload_param"):
        _fit_offload(result, section, accelerator)
    return result


#: The "auto" values `accelerator.prepare` fills itself (accelerate's `_prepare_deepspeed`: the batch sizes from the
#: dataloader, accumulation and clipping from the Accelerator, the ZeRO bucket sizes from the model's hidden size,
#: lr and weight decay from DummyOptim, the warm-up from DummyScheduler) and the precision the plugin sets. Any other
#: "auto" (the HF docs' configs leave optimizer betas and eps so) only the HF Trainer fills, from its arguments.
ACCELERATE_FILLS = frozenset(
    {
        "train_micro_batch_size_per_gpu",
        "train_batch_size",
        "gradient_accumulation_steps",
        "gradient_clipping",
        "zero_optimization.reduce_bucket_size",
        "zero_optimization.stage3_prefetch_bucket_size",
        "zero_optimization.stage3_param_persistence_threshold",
        "optimizer.params.lr",
        "optimizer.params.weight_decay",
        "scheduler.params.warmup_min_lr",
        "scheduler.params.warmup_max_lr",
        "scheduler.params.warmup_num_steps",
        "scheduler.params.total_num_steps",
        "fp16.enabled",
        "bf16.enabled",
    }
)


def trainer_only_auto(config: dict[str, Any]) -> list[str]:
    """The config's "auto" values that only the HF Trainer fills (raw Accelerate refuses them at prepare)."""
    return sorted(
        ".".join(keys)
        for keys, value in _walk(config)
        if value == "auto" and ".".join(keys) not in ACCELERATE_FILLS
    )


def change_findings(filled: Filled, rank: int) -> list[Finding]:
    """Each change made to run the config here, as a warning (on rank 0 only: it is the same on every rank)."""
    return [
        Finding(
            "config_changed",
            Severity.WARNING,
            f"{where}: {change}",
            rank=rank,
            stage="configure",
            expected="the config runs here as written",
        )
        for where, change in filled.changed.items()
        if rank == 0
    ]


#: what the HF Trainer passes to `deepspeed.initialize` for a config with no "optimizer" block (transformers'
#: `deepspeed_optim_sched`: `trainer.create_optimizer()`, AdamW at its default learning rate, and
#: `zero_allow_untested_optimizer`); DeepSpeed alone fails such a config with "zero stage N requires an optimizer"
TRAINER_OPTIMIZER = ("torch.optim.AdamW", {"lr": 5e-5, "weight_decay": 0.0})


def route_optimizer(config: dict[str, Any], parameters: Any) -> Any:
    """The client optimizer for a config that names none (as the HF Trainer builds it); None where it names one."""
    if "optimizer" in config:
        return None
    import torch

    return torch.optim.AdamW(
        parameters, lr=TRAINER_OPTIMIZER[1]["lr"], weight_decay=TRAINER_OPTIMIZER[1]["weight_decay"]
    )


def trainer_optimizer(result: Filled) -> None:
    """For a route that calls `deepspeed.initialize` itself: a config without an optimizer block is told to accept
    the Trainer's (`route_optimizer` builds it), and the change is listed."""
    if "optimizer" in result.config:
        return
    result.config["zero_allow_untested_optimizer"] = True
    name, args = TRAINER_OPTIMIZER
    result.changed["optimizer"] = (
        f"(none) -> {name}({', '.join(f'{k}={v:g}' for k, v in args.items())}) passed to deepspeed.initialize, as the "
        "HF Trainer does for a config without an optimizer block; plain deepspeed.initialize refuses it "
        "('zero stage N requires an optimizer'): add an \"optimizer\" block to run it outside the Trainer"
    )


def _fit_batch(result: Filled, world_size: int) -> None:
    config = result.config
    keys = ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size")
    counts: tuple[Any, ...] = tuple(config.get(key) for key in keys)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in counts):
        return
    micro, accumulation, total = counts
    if total != micro * accumulation * world_size:
        config["train_batch_size"] = micro * accumulation * world_size
        result.changed["train_batch_size"] = (
            f"{total} -> {config['train_batch_size']}: micro batch x accumulation x {world_size} ranks here"
        )


def _fit_offload(result: Filled, section: str, accelerator: str) -> None:
    offload = _section(result.config, "zero_optimization").get(section)
    if not isinstance(offload, dict):
        return
    if offload.get("device") == "nvme":
        where = offload.get("nvme_path")
        if not where or not Path(str(where)).is_dir():
            offload["device"] = "cpu"
            result.changed[f"zero_optimization.{section}.device"] = (
                f"nvme -> cpu: nvme_path {where!r} does not exist on this node, so the NVMe swap itself is not tested"
            )
    if offload.get("pin_memory") and not accelerator.startswith("cuda"):
        offload["pin_memory"] = False
        result.changed[f"zero_optimization.{section}.pin_memory"] = (
            "true -> false: no CUDA here to pin memory for"
        )


def check(user: UserConfig, world_size: int = 1) -> None:
    """DeepSpeed's own validation of the filled config; ConfigError with its message and field."""
    try:
        from deepspeed.runtime.config import DeepSpeedConfig
    except ImportError:
        raise ConfigError(
            f"--deepspeed-config {user.path}: deepspeed is not installed (pip install deepspeed)"
        ) from None
    try:
        filled = fill(user.config, world_size, "cpu")
        DeepSpeedConfig(filled.config)
    except Exception as exc:
        raise ConfigError(f"{user.path}: DeepSpeed refuses it: {_first_error(exc)}") from None


def _first_error(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"{getattr(exc, 'title', '')} {where}: {first.get('msg')}".strip()
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]

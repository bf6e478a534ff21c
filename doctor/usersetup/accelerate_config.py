"""The user's Accelerate config (`ds-doctor run --accelerate-config default_config.yaml`, the file `accelerate
config` writes), as the Accelerator a case builds.

What is read: `distributed_type` (DEEPSPEED, FSDP, MULTI_GPU, MULTI_CPU, NO), `mixed_precision`, and for
DeepSpeed either `deepspeed_config.deepspeed_config_file` (then that file is the DeepSpeed config, with its
`"auto"` values left to Accelerate as in a real launch) or the inline fields `accelerate launch` turns into a
`DeepSpeedPlugin` (zero_stage, offload devices, accumulation, clipping, zero3_init_flag); for FSDP the
`fsdp_config` fields (version, sharding strategy, use_orig_params, CPU offload, state-dict type). The rest
(machines, processes, ports) is the launcher's business: ds-doctor's own launch decides those.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from pathlib import Path
from typing import Any

from ds_doctor.userinput import MAX_CONFIG_BYTES, UserInputError, parse_yaml, read_file, short

TYPES = ("DEEPSPEED", "FSDP", "MULTI_GPU", "MULTI_CPU", "NO")
PRECISIONS = ("no", "fp16", "bf16", "fp8")
_DS_FIELDS = {
    "zero_stage": "zero_stage",
    "offload_optimizer_device": "offload_optimizer_device",
    "offload_param_device": "offload_param_device",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "gradient_clipping": "gradient_clipping",
    "zero3_init_flag": "zero3_init_flag",
    "zero3_save_16bit_model": "zero3_save_16bit_model",
}


class AccelerateConfigError(UserInputError):
    """A config that cannot be used; its message is the one line the CLI prints (a ValueError, and a
    click.UsageError: exit code 2 wherever it is raised)."""


@dataclasses.dataclass(frozen=True)
class AccelerateSetup:
    path: str
    sha256: str
    text: str  # the YAML as read: every rank parses the same bytes

    @functools.cached_property
    def data(self) -> dict[str, Any]:
        """The YAML, parsed once per object (every property below reads it; callers do not change it), with the
        bounds `load` checked it against."""
        return dict(parse_yaml(self.text, self.path, AccelerateConfigError) or {})

    @property
    def distributed_type(self) -> str:
        value = self.data.get("distributed_type", "NO")
        return "NO" if value is False else str(value).upper()  # YAML 1.1 reads an unquoted NO as false

    @property
    def mixed_precision(self) -> str:
        value = self.data.get("mixed_precision", "no")
        return "no" if value is False else str(value).lower()

    def summary(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "config": self.data}


def load(path: str | Path) -> AccelerateSetup:
    from ds_doctor.usersetup.deepspeed_config import kept_path

    name = str(path)
    read = read_file(path, limit=MAX_CONFIG_BYTES, error=AccelerateConfigError, kind="config")
    text = read.text(AccelerateConfigError)
    data = parse_yaml(text, name, AccelerateConfigError)
    if not isinstance(data, dict):
        raise AccelerateConfigError(
            f"{name}: an Accelerate config is a YAML mapping, not {type(data).__name__}"
        )
    where = Path(path).expanduser().resolve() if read.regular else Path(name)
    setup = AccelerateSetup(str(where), hashlib.sha256(read.data).hexdigest(), text)
    _validate(setup, name, copied=not read.regular)
    return setup if read.regular else dataclasses.replace(setup, path=str(kept_path(read, path, ".yaml")))


def _validate(setup: AccelerateSetup, name: str | None = None, copied: bool = False) -> None:
    name = name or setup.path
    _validate_names(setup, name)
    _validate_deepspeed(setup, name, copied)


def _validate_names(setup: AccelerateSetup, name: str) -> None:
    """The distributed type and precision are names Accelerate knows; the plugin sections are mappings."""
    for key in ("distributed_type", "mixed_precision"):
        value = setup.data.get(key)
        if value is not None and not isinstance(value, (str, bool)):
            raise AccelerateConfigError(f"{name}: {key} is {short(value)}, not a name")
    if setup.distributed_type not in TYPES:
        raise AccelerateConfigError(
            f"{name}: distributed_type {short(setup.distributed_type)} is none of {', '.join(TYPES)}"
        )
    if setup.mixed_precision not in PRECISIONS:
        raise AccelerateConfigError(
            f"{name}: mixed_precision {short(setup.mixed_precision)} is none of {', '.join(PRECISIONS)}"
        )
    for section in ("deepspeed_config", "fsdp_config"):
        value = setup.data.get(section)
        if value is not None and not isinstance(value, dict):
            raise AccelerateConfigError(f"{name}: {section} is {short(value)}, not a mapping of settings")


def _validate_deepspeed(setup: AccelerateSetup, name: str, copied: bool) -> None:
    """Each DeepSpeedPlugin argument a scalar; a named DeepSpeed config file loads (and is found from a pipe)."""
    section = setup.data.get("deepspeed_config") or {}
    # what becomes a DeepSpeedPlugin argument: a scalar each
    for key in (*_DS_FIELDS, "deepspeed_config_file"):
        if isinstance(section.get(key), (dict, list)):
            raise AccelerateConfigError(
                f"{name}: deepspeed_config.{key} is {short(section[key])}, not a value"
            )
    ds_file = section.get("deepspeed_config_file")
    if ds_file is not None and not isinstance(ds_file, str):
        raise AccelerateConfigError(
            f"{name}: deepspeed_config.deepspeed_config_file is {short(ds_file)}, not a path"
        )
    if setup.distributed_type == "DEEPSPEED" and ds_file:
        from ds_doctor.usersetup.deepspeed_config import ConfigError
        from ds_doctor.usersetup.deepspeed_config import load as load_ds

        if copied and not Path(ds_file).is_absolute():
            raise AccelerateConfigError(
                f"{name}: its deepspeed_config_file {short(ds_file)} is relative, and the YAML "
                "is no file to be relative to (a pipe?): give its absolute path"
            )
        try:
            load_ds(_ds_path(setup, ds_file))
        except ConfigError as exc:
            raise AccelerateConfigError(f"{name}: its deepspeed_config_file: {exc}") from None


def _ds_path(setup: AccelerateSetup, ds_file: str) -> Path:
    return Path(ds_file) if Path(ds_file).is_absolute() else Path(setup.path).parent / ds_file


@functools.lru_cache(maxsize=4)
def load_once(path: str) -> AccelerateSetup:
    """The setup `--accelerate-config` named (its kept copy, from the run options), read once per process."""
    return load(path)


def skip_reason(setup: AccelerateSetup, device_kind: str) -> str | None:
    """Why this config cannot be exercised here, or None."""
    if setup.distributed_type == "FSDP" and device_kind == "cpu":
        return (
            "the config's FSDP plugin: Accelerate ignores it on CPU (its FSDP path needs CUDA), so nothing of it "
            "would be exercised here; run on a GPU node"
        )
    if setup.distributed_type == "MULTI_GPU" and device_kind == "cpu":
        return "the config is MULTI_GPU: no GPU here (ds-doctor runs MULTI_CPU cases on CPU)"
    if setup.mixed_precision == "fp8":
        return "fp8 mixed precision needs a GPU with fp8 support (and transformer-engine or torchao)"
    return None


def deepspeed_plugin(setup: AccelerateSetup) -> Any:
    """The DeepSpeedPlugin `accelerate launch` would build from this config."""
    from accelerate.utils import DeepSpeedPlugin

    from ds_doctor.usersetup.deepspeed_config import load as load_ds

    section = dict(setup.data.get("deepspeed_config") or {})
    ds_file = section.get("deepspeed_config_file")
    if ds_file:  # read with the bounds and checks of --deepspeed-config
        return DeepSpeedPlugin(hf_ds_config=load_ds(_ds_path(setup, ds_file)).config)
    kwargs = {ours: section[theirs] for theirs, ours in _DS_FIELDS.items() if theirs in section}
    return DeepSpeedPlugin(**kwargs)


#: fsdp_config's keys -> FullyShardedDataParallelPlugin's arguments, as `accelerate launch` maps them
_FSDP_FIELDS = {
    "fsdp_version": "fsdp_version",
    "fsdp_sharding_strategy": "sharding_strategy",
    "fsdp_reshard_after_forward": "reshard_after_forward",
    "fsdp_use_orig_params": "use_orig_params",
    "fsdp_offload_params": "cpu_offload",
    "fsdp_state_dict_type": "state_dict_type",
    "fsdp_cpu_ram_efficient_loading": "cpu_ram_efficient_loading",
    "fsdp_sync_module_states": "sync_module_states",
    "fsdp_activation_checkpointing": "activation_checkpointing",
}


def fsdp_plugin(setup: AccelerateSetup) -> Any:
    """The FullyShardedDataParallelPlugin `accelerate launch` would build from `fsdp_config` (GPU nodes only:
    on CPU the case is skipped before it gets here)."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    section = dict(setup.data.get("fsdp_config") or {})
    return FullyShardedDataParallelPlugin(
        **{ours: section[theirs] for theirs, ours in _FSDP_FIELDS.items() if theirs in section}
    )


def accelerator_kwargs(setup: AccelerateSetup) -> dict[str, Any]:
    """What `Accelerator(...)` takes for this config (besides ds-doctor's own cpu/process-group arguments)."""
    kwargs: dict[str, Any] = {"mixed_precision": setup.mixed_precision}
    if setup.distributed_type == "DEEPSPEED":
        kwargs["deepspeed_plugin"] = deepspeed_plugin(setup)
    elif setup.distributed_type == "FSDP":
        kwargs["fsdp_plugin"] = fsdp_plugin(setup)
    return kwargs

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
import json
import os
from pathlib import Path
from typing import Any

ENV = "DS_DOCTOR_ACCELERATE_CONFIG"
TYPES = ("DEEPSPEED", "FSDP", "MULTI_GPU", "MULTI_CPU", "NO")
PRECISIONS = ("no", "fp16", "bf16", "fp8")
_DS_FIELDS = {"zero_stage": "zero_stage", "offload_optimizer_device": "offload_optimizer_device",
              "offload_param_device": "offload_param_device", "gradient_accumulation_steps": "gradient_accumulation_steps",
              "gradient_clipping": "gradient_clipping", "zero3_init_flag": "zero3_init_flag",
              "zero3_save_16bit_model": "zero3_save_16bit_model"}


class AccelerateConfigError(ValueError):
    """A config that cannot be used; its message is the one line the CLI prints."""


@dataclasses.dataclass(frozen=True)
class AccelerateSetup:
    path: str
    sha256: str
    text: str  # the YAML as read: every rank parses the same bytes

    @functools.cached_property
    def data(self) -> dict[str, Any]:
        """The YAML, parsed once per object (every property below reads it; callers do not change it)."""
        import yaml

        return dict(yaml.safe_load(self.text) or {})

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
    import yaml

    from doctor.usersetup.deepspeed_config import read_user_file

    path, raw = read_user_file(path, AccelerateConfigError)
    text = raw.decode("utf-8", errors="replace")
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise AccelerateConfigError(f"{path}: not YAML: {exc.problem}{where}") from None
    if not isinstance(data, dict):
        raise AccelerateConfigError(f"{path}: an Accelerate config is a YAML mapping, not {type(data).__name__}")
    setup = AccelerateSetup(str(path), hashlib.sha256(raw).hexdigest(), text)
    _validate(setup)
    return setup


def _validate(setup: AccelerateSetup) -> None:
    if setup.distributed_type not in TYPES:
        raise AccelerateConfigError(f"{setup.path}: distributed_type {setup.distributed_type!r} is none of "
                                    f"{', '.join(TYPES)}")
    if setup.mixed_precision not in PRECISIONS:
        raise AccelerateConfigError(f"{setup.path}: mixed_precision {setup.mixed_precision!r} is none of "
                                    f"{', '.join(PRECISIONS)}")
    ds_file = (setup.data.get("deepspeed_config") or {}).get("deepspeed_config_file")
    if setup.distributed_type == "DEEPSPEED" and ds_file:
        from doctor.usersetup.deepspeed_config import ConfigError
        from doctor.usersetup.deepspeed_config import load as load_ds

        base = Path(setup.path).parent
        try:
            load_ds(ds_file if Path(ds_file).is_absolute() else base / ds_file)
        except ConfigError as exc:
            raise AccelerateConfigError(f"{setup.path}: its deepspeed_config_file: {exc}") from None


def from_env() -> AccelerateSetup | None:
    path = os.environ.get(ENV)
    return load(path) if path else None


def skip_reason(setup: AccelerateSetup, device_kind: str) -> str | None:
    """Why this config cannot be exercised here, or None."""
    if setup.distributed_type == "FSDP" and device_kind == "cpu":
        return ("the config's FSDP plugin: Accelerate ignores it on CPU (its FSDP path needs CUDA), so nothing of it "
                "would be exercised here; run on a GPU node")
    if setup.distributed_type == "MULTI_GPU" and device_kind == "cpu":
        return "the config is MULTI_GPU: no GPU here (ds-doctor runs MULTI_CPU cases on CPU)"
    if setup.mixed_precision == "fp8":
        return "fp8 mixed precision needs a GPU with fp8 support (and transformer-engine or torchao)"
    return None


def deepspeed_plugin(setup: AccelerateSetup) -> Any:
    """The DeepSpeedPlugin `accelerate launch` would build from this config."""
    from accelerate.utils import DeepSpeedPlugin

    section = dict(setup.data.get("deepspeed_config") or {})
    ds_file = section.get("deepspeed_config_file")
    if ds_file:
        path = Path(ds_file) if Path(ds_file).is_absolute() else Path(setup.path).parent / ds_file
        return DeepSpeedPlugin(hf_ds_config=json.loads(path.read_text()))
    kwargs = {ours: section[theirs] for theirs, ours in _DS_FIELDS.items() if theirs in section}
    return DeepSpeedPlugin(**kwargs)


#: fsdp_config's keys -> FullyShardedDataParallelPlugin's arguments, as `accelerate launch` maps them
_FSDP_FIELDS = {"fsdp_version": "fsdp_version", "fsdp_sharding_strategy": "sharding_strategy",
                "fsdp_reshard_after_forward": "reshard_after_forward", "fsdp_use_orig_params": "use_orig_params",
                "fsdp_offload_params": "cpu_offload", "fsdp_state_dict_type": "state_dict_type",
                "fsdp_cpu_ram_efficient_loading": "cpu_ram_efficient_loading",
                "fsdp_sync_module_states": "sync_module_states", "fsdp_activation_checkpointing": "activation_checkpointing"}


def fsdp_plugin(setup: AccelerateSetup) -> Any:
    """The FullyShardedDataParallelPlugin `accelerate launch` would build from `fsdp_config` (GPU nodes only:
    on CPU the case is skipped before it gets here)."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    section = dict(setup.data.get("fsdp_config") or {})
    return FullyShardedDataParallelPlugin(**{ours: section[theirs] for theirs, ours in _FSDP_FIELDS.items()
                                             if theirs in section})


def accelerator_kwargs(setup: AccelerateSetup) -> dict[str, Any]:
    """What `Accelerator(...)` takes for this config (besides ds-doctor's own cpu/process-group arguments)."""
    kwargs: dict[str, Any] = {"mixed_precision": setup.mixed_precision}
    if setup.distributed_type == "DEEPSPEED":
        kwargs["deepspeed_plugin"] = deepspeed_plugin(setup)
    elif setup.distributed_type == "FSDP":
        kwargs["fsdp_plugin"] = fsdp_plugin(setup)
    return kwargs

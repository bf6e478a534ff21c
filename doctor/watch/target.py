"""What a watch looks at in a user's job: the module, the optimizer, the engine's name map and config, the
prepared objects (for S0's placeholders), and the device the model computes on; built from a DeepSpeed engine,
an Accelerator or what the HF Trainer hands its callbacks."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ds_doctor.collect.devicemap import unwrap_optimizer


def engine_config(engine: Any) -> Mapping[str, Any] | None:
    """The config dict a DeepSpeed engine was built from."""
    params = getattr(getattr(engine, "_config", None), "_param_dict", None)
    if isinstance(params, Mapping):
        return params
    config = getattr(engine, "config", None)
    return config if isinstance(config, Mapping) else None


def current_rank() -> int:
    try:
        import torch.distributed as dist

        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    except ImportError:
        return 0


def is_deepspeed_engine(obj: Any) -> bool:
    return any(kind.__name__ == "DeepSpeedEngine" for kind in type(obj).__mro__)


def is_accelerator(obj: Any) -> bool:
    return any(
        kind.__name__ == "Accelerator" and kind.__module__.startswith("accelerate")
        for kind in type(obj).__mro__
    )


@dataclasses.dataclass
class Target:
    """The objects of one job. `engine` is a DeepSpeed engine or None; `name_map` is the Parameter -> name map
    checkpoints are written with (DeepSpeed's `engine.param_names`, or the one the watch took at the start,
    built the way DeepSpeed builds it, where no engine is in reach)."""

    kind: str  # "deepspeed", "accelerate", "accelerate+deepspeed", "trainer", "trainer+deepspeed"
    module: Any
    optimizer: Any  # unwrapped: the ZeRO optimizer, or the torch optimizer
    device: str
    engine: Any = None
    config: Mapping[str, Any] | None = None  # the DeepSpeed config, when DeepSpeed runs
    # what prepare handed back (optimizers, schedulers): S0 looks for placeholders
    prepared: tuple[Any, ...] = ()
    own_name_map: Mapping[Any, str] | None = None
    num_processes: int | None = None  # the processes Accelerate counts (held against the process group)

    @property
    def name_map(self) -> Mapping[Any, str] | None:
        if self.engine is not None:
            return getattr(self.engine, "param_names", None)
        return self.own_name_map

    @classmethod
    def of_engine(cls, engine: Any, kind: str = "deepspeed", prepared: tuple[Any, ...] = ()) -> Target:
        return cls(
            kind=kind,
            module=engine.module,
            optimizer=unwrap_optimizer(engine.optimizer),
            device=str(engine.device),
            engine=engine,
            config=engine_config(engine),
            prepared=prepared,
        )

    @classmethod
    def of_accelerator(cls, accelerator: Any) -> Target:
        """The first prepared model and optimizer (a watch follows one model; several are rare in one job)."""
        if not accelerator._models or not accelerator._optimizers:
            raise ValueError(
                "watch(accelerator) needs a model and an optimizer passed through accelerator.prepare first"
            )
        prepared = tuple(accelerator._optimizers) + tuple(accelerator._schedulers)
        counted = int(accelerator.num_processes)
        wrapped = getattr(accelerator, "deepspeed_engine_wrapped", None)
        if wrapped is not None:
            engine = cls.of_engine(wrapped.engine, kind="accelerate+deepspeed", prepared=prepared)
            return dataclasses.replace(engine, num_processes=counted)
        module = accelerator.unwrap_model(accelerator._models[0])
        return cls(
            kind="accelerate",
            module=module,
            optimizer=unwrap_optimizer(accelerator._optimizers[0]),
            device=str(accelerator.device),
            prepared=prepared,
            own_name_map=name_map_of(module),
            num_processes=counted,
        )

    @classmethod
    def of_trainer(cls, args: Any, model: Any, optimizer: Any, lr_scheduler: Any) -> Target:
        """What the Trainer passes its callbacks: the model (not the engine), the prepared optimizer."""
        ds = getattr(args, "hf_deepspeed_config", None)
        config = getattr(ds, "config", None) if getattr(args, "deepspeed", None) else None
        return cls(
            kind="trainer+deepspeed" if config else "trainer",
            module=model,
            optimizer=unwrap_optimizer(optimizer),
            device=str(args.device),
            config=config,
            prepared=tuple(x for x in (optimizer, lr_scheduler) if x is not None),
            own_name_map=name_map_of(model),
        )


def name_map_of(module: Any) -> dict[Any, str]:
    """Parameter -> name, as `deepspeed.initialize` builds `engine.param_names` (a snapshot: it goes stale the
    same way when a parameter is replaced later)."""
    return {param: name for name, param in module.named_parameters()}


def prepared_classes(prepared: tuple[Any, ...]) -> list[str]:
    """Class names of what prepare returned and of what each wraps (AcceleratedOptimizer.optimizer, ...)."""
    names = []
    for obj in prepared:
        names.append(type(obj).__name__)
        for attr in ("optimizer", "scheduler"):
            inner = getattr(obj, attr, None)
            if inner is not None and hasattr(inner, "state_dict"):
                names.append(type(inner).__name__)
    return names

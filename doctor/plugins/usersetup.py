"""The user's own setup, as a probe uses it: their DeepSpeed config (filled for this run, each change listed), their
Accelerate config, their model (`ctx.options` says which the run names)."""

from ds_doctor.usersetup import accelerate_config
from ds_doctor.usersetup import model as user_model
from ds_doctor.usersetup.deepspeed_config import (
    TRAINER_OPTIMIZER,
    UserConfig,
    change_findings,
    fill,
    route_optimizer,
    trainer_only_auto,
    trainer_optimizer,
)
from ds_doctor.usersetup.model import tiny_config

__all__ = [
    "TRAINER_OPTIMIZER",
    "UserConfig",
    "accelerate_config",
    "change_findings",
    "fill",
    "route_optimizer",
    "tiny_config",
    "trainer_only_auto",
    "trainer_optimizer",
    "user_model",
]

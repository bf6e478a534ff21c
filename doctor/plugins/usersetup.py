"""The user's own setup, as a probe uses it: their DeepSpeed config (filled for this run, each change listed), their
Accelerate config, their model (`ctx.options` says which the run names)."""

from doctor.usersetup import accelerate_config
from doctor.usersetup import model as user_model
from doctor.usersetup.deepspeed_config import (
    TRAINER_OPTIMIZER,
    UserConfig,
    change_findings,
    fill,
    route_optimizer,
    trainer_optimizer,
)
from doctor.usersetup.model import tiny_config

__all__ = [
    "TRAINER_OPTIMIZER",
    "UserConfig",
    "accelerate_config",
    "change_findings",
    "fill",
    "route_optimizer",
    "tiny_config",
    "trainer_optimizer",
    "user_model",
]

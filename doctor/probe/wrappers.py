"""How a user's code wraps a model for distributed training: the one name every family's routes use for it."""

from __future__ import annotations

import enum


class Wrapper(str, enum.Enum):
    """What wraps the model and trains it in a case (a route's `wrapper`). Its value is the name reports and skip
    reasons print. DeepSpeed's ZeRO stage and offload are a route's own settings beside it (`zero` says where a stage
    applies)."""

    DDP = "ddp"  # torch DistributedDataParallel
    FSDP1 = "fsdp1"  # torch FullyShardedDataParallel
    FSDP2 = "fsdp2"  # torch fully_shard
    DEEPSPEED = "deepspeed"  # deepspeed.initialize: the engine (ZeRO stages 0-3)
    ACCELERATE = "accelerate"  # Accelerator without a DeepSpeed or FSDP plugin
    ACCELERATE_DEEPSPEED = "accelerate-deepspeed"  # Accelerator(deepspeed_plugin=...)
    ACCELERATE_FSDP = "accelerate-fsdp"  # Accelerator(fsdp_plugin=...)
    TRAINER = "trainer"  # the Hugging Face transformers Trainer
    COMPOSER = "composer"  # MosaicML Composer's Trainer

    def __str__(self) -> str:
        return self.value

    @property
    def zero(self) -> bool:
        """Whether DeepSpeed's engine does the wrapping, so that a ZeRO stage is one of the route's settings."""
        return self in (Wrapper.DEEPSPEED, Wrapper.ACCELERATE_DEEPSPEED)

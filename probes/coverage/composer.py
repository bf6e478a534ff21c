"""S3's Composer route: Composer's own Trainer with FSDP wrapping ds-doctor's four-part model.

Composer's `prepare_fsdp_module` (composer/distributed/dist_strategy.py) wraps the model and rebuilds the optimizer's
param groups in place; before 0.24.0 a single group was rebuilt from `model.parameters()` (mosaicml/composer#3493,
fixed by #3502). Composer pins torch < 2.7.1: on a newer stack it runs from `--with mosaicml==VER --ignore-pins`.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable
from typing import Any

from ds_doctor.plugins import ProbeContext
from ds_doctor.plugins.collect import clean_name
from ds_doctor.plugins.requirements import COMPOSER


def composer_trainer(
    ctx: ProbeContext,
    cleanup: contextlib.ExitStack,
    build_model: Callable[[], Any],
    optimizer_of: Callable[[Any], Any],
    batch: tuple[Any, Any],
) -> tuple[Any, Any, Callable[[], None], Callable[[], dict[str, Any]]]:
    """(the wrapped module, the optimizer, one step, full values by original name) of a Composer Trainer with FSDP
    (use_orig_params) over a ComposerModel around `build_model()`, trained on the one `batch`."""
    import torch

    if importlib.util.find_spec(COMPOSER.module) is None:
        ctx.skip(
            f"Composer (mosaicml) is not installed; its releases pin torch < 2.7.1 and this node has torch "
            f"{torch.__version__}: run with --with mosaicml==VER --ignore-pins (and a torchvision that imports "
            "here) to check its single-group rebuild (mosaicml/composer#3493)"
        )
    if ctx.device_kind != "cuda":  # read in composer/distributed/dist_strategy.py, 0.23.5 and 0.32.1 alike
        ctx.skip(
            "Composer's FSDP preparation passes device_id=torch.cuda.current_device() to FSDP: its FSDP route "
            "needs a GPU"
        )
    from composer import Trainer
    from composer.models import ComposerModel
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    class FourParts(ComposerModel):
        def __init__(self) -> None:
            super().__init__()
            self.module = build_model()

        def forward(self, batch: Any) -> Any:
            return self.module(batch[0])

        def loss(self, outputs: Any, batch: Any, *args: Any, **kwargs: Any) -> Any:
            return torch.nn.functional.mse_loss(outputs, batch[1])

    ctx.enter("wrap")
    model = FourParts()
    optimizer = optimizer_of(model.module)
    dataset = torch.utils.data.TensorDataset(*batch)
    # Composer refuses a loader without a DistributedSampler at world size > 1 (composer/core/data_spec.py): each rank
    # takes its share of the batch, in order, as a user's job does
    sampler: Any = (
        torch.utils.data.distributed.DistributedSampler(dataset, shuffle=False)
        if ctx.world_size > 1
        else None
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=len(batch[0]), sampler=sampler)
    trainer = Trainer(
        model=model,
        optimizers=optimizer,
        train_dataloader=loader,
        max_duration="1ba",
        device="gpu",
        # Composer's GPU default is amp_fp16, with FSDP parameters in fp16 and a grad scaler that skips a step that
        # overflows: the case asks which parameters one step updates, so it steps in fp32
        precision="fp32",
        parallelism_config={"fsdp": {"use_orig_params": True}},
        progress_bar=False,
        log_to_console=False,
        loggers=[],
        save_folder=None,
    )
    cleanup.callback(trainer.close)
    wrapped = trainer.state.model.module

    def full_values() -> dict[str, Any]:
        with FSDP.summon_full_params(wrapped, writeback=False):
            return {clean_name(n): p.detach().to("cpu", copy=True) for n, p in wrapped.named_parameters()}

    return wrapped, optimizer, trainer.fit, full_values

"""Model factories for the equivalence family's tests (`ds-doctor run --model tests.resources.equivalence_models:...`):
one healthy, one that gets the math wrong in a way only more than one rank shows."""

from __future__ import annotations

from typing import Any

import torch

from ds_doctor.probes.shared.models import IN_FEATURES, OUT_FEATURES, build_mlp


class Regression(torch.nn.Module):
    """The probes' MLP with its loss inside, as user modules often are: forward(x, y) returns the MSE."""

    def __init__(self, divide_by: int = 1) -> None:
        super().__init__()
        self.net = build_mlp(seed=0)
        self.divide_by = divide_by

    def forward(self, x: Any, y: Any) -> Any:
        return torch.nn.functional.mse_loss(self.net(x), y) / self.divide_by


def make_batch(batch_size: int, device: Any) -> tuple[Any, Any]:
    return torch.randn(batch_size, IN_FEATURES, device=device), torch.randn(
        batch_size, OUT_FEATURES, device=device
    )


def regression() -> tuple[torch.nn.Module, Any]:
    return Regression(), make_batch


def loss_over_world_size(world_size: int) -> tuple[torch.nn.Module, Any]:
    """A user who averages the loss over the ranks by hand, on top of DDP's (and ZeRO's) gradient average: the loss
    and the gradients are divided by the world size twice. Right at one rank, wrong at two."""
    return Regression(divide_by=world_size), make_batch


class AveragedByHand(Regression):
    """The loss divided by the process group's size whenever there is one (a common hand-written "average over
    ranks"), on top of DDP's and ZeRO's own gradient average."""

    def forward(self, x: Any, y: Any) -> Any:
        import torch.distributed as dist

        loss = super().forward(x, y)
        return loss / dist.get_world_size() if dist.is_available() and dist.is_initialized() else loss


def loss_over_process_group() -> tuple[torch.nn.Module, Any]:
    """Right at one rank, wrong at two: and only a reference with no process group can tell."""
    return AveragedByHand(), make_batch


class DividedByWorld(torch.nn.Module):
    """A layer that divides its input by the process group's size (a hand-made "average" in the middle of a
    model): the first module whose output parts from the reference's."""

    def forward(self, x: Any) -> Any:
        import torch.distributed as dist

        return x / dist.get_world_size() if dist.is_available() and dist.is_initialized() else x


class MidLayerByHand(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(IN_FEATURES, 16)
        self.by_world = DividedByWorld()
        self.last = torch.nn.Linear(16, OUT_FEATURES)

    def forward(self, x: Any, y: Any) -> Any:
        return torch.nn.functional.mse_loss(self.last(torch.tanh(self.by_world(self.first(x)))), y)


def mid_layer_over_process_group() -> tuple[torch.nn.Module, Any]:
    return MidLayerByHand(), make_batch


class RefusesFullPrecision(Regression):
    """The world-size division of `loss_over_world_size`, in a module that raises when it runs under a process
    group without autocast: a route's bf16 setting trains, the same setting in fp32 cannot (a shrink rerun that
    raises). The reference (no process group) runs it in any dtype."""

    def forward(self, x: Any, y: Any) -> Any:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and not torch.is_autocast_enabled("cpu"):
            raise RuntimeError("planted: this module refuses to train without autocast")
        return super().forward(x, y)


def refuses_full_precision(world_size: int) -> tuple[torch.nn.Module, Any]:
    module = RefusesFullPrecision(divide_by=world_size)
    return module, make_batch

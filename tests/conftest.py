"""Shared fixtures. DeepSpeed unit tests run in this process on a real one-rank gloo group."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ds_doctor.ops import cache, interpreter_first, locks

# DeepSpeed engines built in this process (the unit tests' own) load the ops as the README tells a job to: with the
# ninja the run's build phase and ranks use (another ninja first on PATH records builds otherwise, and the shared
# folder would be rebuilt each time one or the other loads it), from the folder that phase left them in (make's set-up
# built them: torch's default, or ds-doctor's own where another environment's builds are in the default)
os.environ["PATH"] = interpreter_first(os.environ.get("PATH"))
# a build killed mid-way (a Ctrl-C'd `make`, a SIGKILLed run) may have left its lock in either folder: DeepSpeed in
# this process would wait on it with no bound, so it is cleared first, as a run's build phase clears it
for _root in (cache.likely_root(os.environ), cache.private_root(os.environ)):
    for _line in locks.heal_root(_root) if _root is not None else []:
        print(f"conftest: {_line}", file=sys.stderr)
if "TORCH_EXTENSIONS_DIR" not in os.environ and (_built := cache.stamped_root(os.environ)) is not None:
    os.environ["TORCH_EXTENSIONS_DIR"] = str(_built)

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None
requires_deepspeed = pytest.mark.skipif(
    not HAS_DEEPSPEED, reason="deepspeed not installed: pip install deepspeed"
)
HAS_ACCELERATE = all(importlib.util.find_spec(m) is not None for m in ("accelerate", "transformers"))
requires_accelerate = pytest.mark.skipif(
    not HAS_ACCELERATE, reason="accelerate/transformers not installed: pip install accelerate transformers"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def dist_group() -> Iterator[None]:
    """A real single-rank gloo process group, as torchrun would set it up."""
    import torch.distributed as dist

    saved = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port())
    )
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    yield
    dist.destroy_process_group()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def build_engine(params: Any) -> Any:
    """A real DeepSpeed engine over the probes' tiny MLP, with the zero_offload probe's config for a `ZeroCase`."""
    import deepspeed

    from ds_doctor.probes.shared.models import build_mlp
    from ds_doctor.probes.zero_offload import build_config

    model = build_mlp()
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=build_config(params)
    )
    return engine


def train_one_step(engine: Any, sink: Any = None) -> int:
    """Run one accumulation window; returns how many unscale_and_clip_grads calls were seen."""
    from ds_doctor.collect.observe import observe_unscale_and_clip
    from ds_doctor.probes.zero_offload import train_window

    with observe_unscale_and_clip(engine.optimizer, 0, sink or (lambda _r: None)) as calls:
        train_window(engine, seed=0)
    return calls[0]

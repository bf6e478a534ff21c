"""`DoctorCallback`: a watch inside the HF Trainer, on the Trainer's own callback events.

- `on_train_begin`: after the Trainer prepared the model and optimizer (and loaded a checkpoint it resumes
  from): the after_prepare checks, and the after_load ones when it resumed (global_step > 0).
- `on_step_begin` / `on_step_end`: around the first optimizer step and every `every` steps (or as `every="auto"`
  spaces them).
- `on_step_end` with `control.should_save` set: the Trainer saves right after this event returns, so this is the
  moment before the save (S1); with `raise_on="error"` the DoctorError stops `train()` before anything is written.
- `on_train_end`: the watch is closed.

The Trainer hands callbacks the model, not the DeepSpeed engine: the name map a checkpoint is written with is
the one the watch takes at train begin, built as `deepspeed.initialize` builds `engine.param_names` (both go
stale alike when a parameter is replaced later).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ds_doctor.watch.hooks import Session
from ds_doctor.watch.target import Target
from ds_doctor.watch.watcher import DEFAULT_BUDGET, Watch


class DoctorCallback(TrainerCallback):
    def __init__(
        self,
        out: str | Path | None = "ds-doctor-watch.json",
        every: int | str | None = None,
        raise_on: str | None = None,
        device_maps: bool = False,
        budget: float = DEFAULT_BUDGET,
        table: str | Path | None = None,
    ) -> None:
        self.options: dict[str, Any] = {
            "out": out,
            "every": every,
            "raise_on": raise_on,
            "device_maps": device_maps,
            "budget": budget,
            "table": table,
        }
        Watch.validate(**self.options)
        self.watch: Watch | None = None
        self.session: Session | None = None
        self._step: contextlib.AbstractContextManager[None] | None = None

    def on_train_begin(
        self,
        args: Any,
        state: Any,
        control: Any,
        model: Any = None,
        optimizer: Any = None,
        lr_scheduler: Any = None,
        **kwargs: Any,
    ) -> None:
        target = Target.of_trainer(args, model, optimizer, lr_scheduler)
        self.watch = Watch(target, **self.options)
        self.watch.steps = state.global_step
        self.session = Session(self.watch)
        self.session.after_prepare()
        if state.global_step > 0:  # resumed: the Trainer loaded the checkpoint before this event
            self.session.after_load()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is None or self.watch is None:
            return
        self.watch.steps = state.global_step
        self._step = self.session.stepping(True)
        self._step.__enter__()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.session is None or self.watch is None:
            return
        if self._step is not None:
            step, self._step = self._step, None
            step.__exit__(None, None, None)
        self.watch.steps = state.global_step
        if control.should_save:
            self.session.before_save()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.watch is not None:
            self.watch.close()

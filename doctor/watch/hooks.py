"""Where a watch hooks into a job, each undone by `Watch.close`.

The libraries' own hook points where they fire at the right moment: the HF Trainer's callback events
(`ds_doctor.watch.callback`), Accelerate's `register_save_state_pre_hook` (without DeepSpeed). Methods are wrapped
where no hook point fires in time: DeepSpeed's `save_checkpoint` / `load_checkpoint` / `step` have none, and
Accelerate runs its save pre-hooks after DeepSpeed has written its checkpoint (accelerator.py `save_state`) and its
load pre-hooks before anything is loaded, so under DeepSpeed the engine's `save_checkpoint` is wrapped, and
`load_state` is wrapped to check after it. A wrapper calls the real method with the same arguments and returns
what it returns.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from ds_doctor.collect.devicemap import is_zero3_optimizer, is_zero12_optimizer
from ds_doctor.collect.observe import observe_unscale_and_clip
from ds_doctor.reports.model import TensorRecord
from ds_doctor.watch import moments, replicas
from ds_doctor.watch.target import Target
from ds_doctor.watch.watcher import Watch


def wrap(watch: Watch, obj: Any, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace `obj.name` by `make(original)` on the instance; `close` puts the instance back as it was."""
    original = getattr(obj, name)
    had_own = name in vars(obj)
    own = vars(obj).get(name)
    wrapper = functools.wraps(original)(make(original))
    setattr(obj, name, wrapper)

    def undo() -> None:
        if had_own:
            setattr(obj, name, own)
        elif vars(obj).get(name) is wrapper:
            delattr(obj, name)

    watch.on_close(undo)


class Session:
    """One watch's moments over one target: the state later moments compare against."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.target: Target = watch.target
        self.initial: list[TensorRecord] = []  # fp32 partitions after prepare, for boundary_grads
        self.ties: list[TensorRecord] = []

    def after_prepare(self) -> None:
        target, rank, keep = self.target, self.watch.rank, self.watch.device_maps

        def check() -> moments.Check:
            result = moments.after_prepare(target, rank, keep)
            self.ties = moments.tied_records(target, rank, "after_prepare")
            self.initial = moments.fp32_records(target, rank)
            return result

        self.watch.moment("after_prepare", "after_prepare", check)

    def before_save(self) -> None:
        label = f"before_save step {self.watch.steps}"
        self.watch.moment(
            "before_save",
            label,
            lambda: moments.before_save(self.target, self.watch.rank, label, self.watch.device_maps),
        )

    def after_load(self) -> None:
        label = "after_load"
        self.watch.moment(
            "after_load",
            label,
            lambda: moments.after_load(
                self.target, self.watch.rank, label, self.ties, self.watch.device_maps
            ),
        )

    def checked_after(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """A loader (`load_checkpoint`, `load_state`) that runs the after_load moment once it has returned."""

        def load(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            self.after_load()
            return out

        return load

    @contextlib.contextmanager
    def stepping(self, boundary: bool) -> Iterator[None]:
        """Around the code that runs one optimizer step (if `boundary`): at a watched step, the clip operands
        are recorded as ZeRO's unscale_and_clip_grads gets them, and the step moment runs after it."""
        if not boundary:
            yield
            return
        number = self.watch.steps + 1
        if not self.watch.wants_step(number):
            yield
            self.watch.steps = number
            return
        clip: list[TensorRecord] = []
        optimizer = self.target.optimizer
        zero = is_zero3_optimizer(optimizer) or is_zero12_optimizer(optimizer)
        observer = (
            observe_unscale_and_clip(optimizer, self.watch.rank, clip.extend)
            if zero
            else contextlib.nullcontext()
        )
        label = f"step {number}"

        def check() -> moments.Check:
            return moments.step(
                self.target, self.watch.rank, label, clip, self.initial, self.watch.device_maps
            )

        try:
            with observer:
                yield
        except BaseException as exc:
            self.watch.steps = number
            # what the clip saw, beside the job's error; then the error, classified as a run's and triage's are
            self.watch.moment("step", label, check, collective=False)
            if isinstance(exc, Exception):
                self.watch.job_failed(exc, label)
            raise
        self.watch.steps = number
        drift = replicas.check(
            self.target, self.watch.rank, label
        )  # a collective: every rank, the same steps

        def checked() -> moments.Check:
            result = check()
            result.findings.extend(drift)
            return result

        self.watch.moment("step", label, checked)


def attach_engine(session: Session, engine: Any, *, save: bool = True, load: bool = True) -> None:
    """DeepSpeed: before `save_checkpoint`, after `load_checkpoint`, around `step` at accumulation boundaries."""
    watch = session.watch

    def make_save(original: Callable[..., Any]) -> Callable[..., Any]:
        def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
            session.before_save()  # raises DoctorError first with raise_on="error": nothing is written
            return original(*args, **kwargs)

        return save_checkpoint

    def make_step(original: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            with session.stepping(bool(engine.is_gradient_accumulation_boundary())):
                return original(*args, **kwargs)

        return step

    if save:
        wrap(watch, engine, "save_checkpoint", make_save)
    if load:
        wrap(watch, engine, "load_checkpoint", session.checked_after)
    wrap(watch, engine, "step", make_step)


def attach_accelerator(session: Session, accelerator: Any) -> None:
    """Accelerate: through the engine under DeepSpeed (its save_checkpoint; steps happen in engine.step), else
    its save pre-hook and the prepared optimizer's step; `load_state` wrapped to check after it in both."""
    watch = session.watch
    engine = session.target.engine
    if engine is not None:
        attach_engine(session, engine, load=False)
    else:
        handle = accelerator.register_save_state_pre_hook(
            lambda models, weights, output_dir: session.before_save()
        )
        watch.on_close(handle.remove)
        prepared = accelerator._optimizers[0]

        def make_step(original: Callable[..., Any]) -> Callable[..., Any]:
            def step(*args: Any, **kwargs: Any) -> Any:
                with session.stepping(bool(accelerator.sync_gradients)):
                    return original(*args, **kwargs)

            return step

        wrap(watch, prepared, "step", make_step)

    wrap(watch, accelerator, "load_state", session.checked_after)

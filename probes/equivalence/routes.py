"""How each `Wrapper` an equivalence case names trains, one optimizer step at a time: DDP, FSDP1, FSDP2, DeepSpeed
(ZeRO 0-3, optimizer offload) and Accelerate with and without DeepSpeed (the Trainer's in `trainer`). Each is written
as its documentation says a training loop is written (no_sync / set_requires_gradient_sync / engine.backward+step /
accelerator.accumulate), and each step yields what the reference yields: the global loss, the gradient norm the
route computed before clipping, the lr and the full parameters (gathered)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ds_doctor.plugins import ProbeContext, Wrapper
from ds_doctor.plugins.collect import clean_name
from ds_doctor.probes.equivalence.cases import Route
from ds_doctor.probes.equivalence.subject import Hyper, StepRecord, Subject, full_params
from ds_doctor.probes.equivalence.where import recording
from ds_doctor.probes.shared.common import full_values, refuse_fsdp2_over_gloo_on_gpu


class Session:
    """One route, built and ready to take optimizer step `s` on the shared data stream."""

    dtype: Any = None

    def __init__(self, ctx: ProbeContext, route: Route, subject: Subject, hyper: Hyper) -> None:
        import torch

        self.ctx, self.route, self.subject, self.hyper = ctx, route, subject, hyper
        self.outputs: dict[
            int, dict[str, Any]
        ] = {}  # step -> each module's output on micro-batch 0 (`where`)
        self.grads: dict[int, dict[str, Any]] = {}  # step -> the gradient of each of those outputs
        # a shuffled DataLoader's: its length, and (step, micro-batch, samples) as this rank drew them
        self.samples = 0
        self.drawn: list[tuple[int, int, list[int]]] = []
        self.ran_out: str | None = None  # why the steps ended early (`LoaderRanOut`), where they did
        self.device = torch.device(ctx.device)
        self.dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            hyper.dtype
        ]

    def step(self, s: int) -> StepRecord:
        raise NotImplementedError

    def autocast(self) -> Any:
        """The forward's precision context: torch's autocast where the route's bf16 is autocast (DDP in the
        matrix), else nothing (the wrapper casts: FSDP's mixed precision, DeepSpeed's bf16, Accelerate's)."""
        return contextlib.nullcontext()

    def params(self) -> dict[str, Any]:
        """Every parameter's full value (gathered), fp32, on the CPU, under its original name."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the route holds (a DeepSpeed engine's hooks and groups)."""

    def global_loss(self, window: Any, micros: int | None = None) -> float:
        """The mean loss over the global batch: every rank's window summed, divided by the global micro-batches (each
        rank's `micros`, where a window is cut short, else the accumulation steps)."""
        import torch.distributed as dist

        dist.all_reduce(window)
        return float(window) / ((micros or self.hyper.accumulation) * self.ctx.world_size)

    def micro(self, model: Any, s: int, k: int, indices: Any = None) -> Any:
        """Micro-batch `k` of step `s` through `model` (the samples `indices` where a DataLoader drew them); on the
        first, each module's output is recorded."""
        recorder: contextlib.AbstractContextManager[dict[str, Any]] = (
            recording(model, self.grads.setdefault(s, {})) if k == 0 else contextlib.nullcontext({})
        )
        with recorder as outputs, self.autocast():
            loss = self.subject.micro_loss(
                model,
                s,
                k,
                self.ctx.rank,
                self.hyper.micro_batch,
                dtype=self.dtype,
                device=self.device,
                indices=indices,
            )
        if k == 0:
            self.outputs[s] = outputs
        return loss

    # resume: what a checkpoint round trip must carry
    def save(self, directory: Path) -> None:
        raise NotImplementedError(f"{self.route.wrapper} has no resume path here")

    def load(self, directory: Path) -> None:
        raise NotImplementedError(f"{self.route.wrapper} has no resume path here")

    def offload_and_reload(self) -> None:
        """The route's states moved aside and back (DeepSpeed's `offload_states` knob): a route without them has
        no such setting."""
        raise NotImplementedError(f"{type(self).__name__} has no offload_states")

    def optimizer(self) -> Any:
        raise NotImplementedError

    def scheduler_step(self) -> int | None:
        return None


class TorchSession(Session):
    """DDP, FSDP1 and FSDP2: a torch AdamW on the wrapped model, the loop their docs write."""

    def __init__(self, ctx: ProbeContext, route: Route, subject: Subject, hyper: Hyper) -> None:
        import torch

        super().__init__(ctx, route, subject, hyper)
        if route.knobs is not None:  # the model stays fp32; bf16 is the wrapper's mixed precision or autocast
            self.dtype = torch.float32
        ctx.enter("wrap")
        self.module = hyper.module(subject, ctx.world_size).to(self.device)
        self.model = self.wrap(self.module)
        self.opt = hyper.optimizer(self.model)
        build = torch_schedule(hyper)
        self.scheduler = build(self.opt) if build is not None else None
        if route.knobs is not None and route.knobs.state_dict_first:
            from torch.distributed.checkpoint.state_dict import get_state_dict

            ctx.enter("state dict")
            get_state_dict(self.model, self.opt)  # a step-0 checkpoint's dicts; nothing is loaded back

    def bf16(self) -> bool:
        """Whether the matrix asks this route for bf16 (the wrapper's own mixed precision)."""
        return self.route.knobs is not None and self.route.knobs.precision == "bf16"

    def wrap(self, module: Any) -> Any:
        raise NotImplementedError

    def sync(self, k: int) -> Any:
        """The context that holds the gradient all-reduce back until the last micro-batch of the window."""
        return contextlib.nullcontext()

    def clip(self) -> Any:
        import torch

        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.hyper.clip or float("inf"))

    def step(self, s: int) -> StepRecord:
        import torch

        # what this step uses (a scheduler moves it after the step)
        lr = float(self.opt.param_groups[0]["lr"])
        window = torch.zeros((), dtype=torch.float32, device=self.device)
        for k in range(self.hyper.accumulation):
            self.ctx.enter(f"step {s} micro {k}")
            with self.sync(k):
                loss = self.micro(self.model, s, k)
                (loss / self.hyper.accumulation).backward()
            window += loss.detach().float()
        loss_value = self.global_loss(window)
        norm = self.clip()
        self.opt.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.opt.zero_grad(set_to_none=True)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        return StepRecord(loss_value, float(norm), lr, self.params())

    def params(self) -> dict[str, Any]:
        return full_params(self.module)


class DDPSession(TorchSession):
    def wrap(self, module: Any) -> Any:
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(
            module, device_ids=[self.device.index] if self.device.type == "cuda" else None
        )

    def autocast(self) -> Any:
        import torch

        if self.bf16():  # torch's documented mixed precision for DDP: autocast around the forward
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def sync(self, k: int) -> Any:
        return self.model.no_sync() if k < self.hyper.accumulation - 1 else contextlib.nullcontext()


class FSDP1Session(TorchSession):
    def wrap(self, module: Any) -> Any:
        import torch
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        # a tied model: root
        policy = None if self.subject.user is not None else ModuleWrapPolicy({torch.nn.Linear})
        extra: dict[str, Any] = {}
        if self.bf16():
            from torch.distributed.fsdp import MixedPrecision

            bf16 = torch.bfloat16
            extra["mixed_precision"] = MixedPrecision(param_dtype=bf16, reduce_dtype=bf16, buffer_dtype=bf16)
        if self.hyper.groups != "one":  # parameter groups by name need the original parameters (FSDP's docs)
            extra["use_orig_params"] = True
        if self.route.knobs is not None and self.route.knobs.hybrid:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import ShardingStrategy

            # replicate across the ranks, shard within groups of one (FSDP's documented hybrid layout)
            mesh = init_device_mesh(
                self.device.type, (self.ctx.world_size, 1), mesh_dim_names=("replicate", "shard")
            )
            extra |= {"sharding_strategy": ShardingStrategy.HYBRID_SHARD, "device_mesh": mesh}
        return FSDP(module, auto_wrap_policy=policy, device_id=self.device, **extra)

    def sync(self, k: int) -> Any:
        return self.model.no_sync() if k < self.hyper.accumulation - 1 else contextlib.nullcontext()

    def clip(self) -> Any:
        import torch

        # the user's mistake: the global norm of FlatParameter *shards* is this rank's
        if self.route.local_clip:
            return torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.hyper.clip or float("inf"))
        return self.model.clip_grad_norm_(self.hyper.clip or float("inf"))

    def params(self) -> dict[str, Any]:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        with FSDP.summon_full_params(self.model, writeback=False):
            return full_params(self.model, clean_name)


class FSDP2Session(TorchSession):
    def wrap(self, module: Any) -> Any:
        import torch
        from torch.distributed.fsdp import fully_shard

        refuse_fsdp2_over_gloo_on_gpu(self.ctx)
        extra: dict[str, Any] = {}
        if self.bf16():  # the FSDP2 tutorial's policy: bf16 compute, fp32 reduction
            from torch.distributed.fsdp import MixedPrecisionPolicy

            extra["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if self.subject.user is None:  # the MLP: each Linear its own unit, as users shard blocks
            for child in module:
                if isinstance(child, torch.nn.Linear):
                    fully_shard(child, **extra)
        return fully_shard(module, **extra)

    def sync(self, k: int) -> Any:
        self.model.set_requires_gradient_sync(k == self.hyper.accumulation - 1)
        return contextlib.nullcontext()

    def params(self) -> dict[str, Any]:
        import torch

        return {
            n: p.full_tensor().detach().to("cpu", torch.float32, copy=True)
            for n, p in self.model.named_parameters()
        }


class DeepSpeedSession(Session):
    """deepspeed.initialize with the route's config; a window is `engine.backward` + `engine.step` per micro-batch."""

    def __init__(
        self,
        ctx: ProbeContext,
        route: Route,
        subject: Subject,
        hyper: Hyper,
        config: dict[str, Any],
        client_optimizer: Any = None,
    ) -> None:
        import deepspeed

        super().__init__(ctx, route, subject, hyper)
        ctx.enter("initialize")
        module = hyper.module(subject, ctx.world_size)
        # the matrix's parameter groups, as the user's code builds them; else every trainable parameter
        params: Any = (
            hyper.param_groups(module.named_parameters())
            if route.knobs is not None
            else [p for p in module.parameters() if p.requires_grad]
        )
        optimizer = client_optimizer(params) if client_optimizer else None
        # a client scheduler where the client passes the optimizer (the engine steps it per optimizer step)
        scheduler = torch_schedule(hyper) if optimizer is not None else None
        self.engine, _, _, _ = deepspeed.initialize(
            model=module,
            optimizer=optimizer,
            config=config,
            model_parameters=None if optimizer else params,
            lr_scheduler=scheduler,
        )

    def step(self, s: int) -> StepRecord:
        import torch

        engine = self.engine
        lr = float(engine.get_lr()[0])  # what this step uses (the scheduler moves it after the step)
        window = torch.zeros((), dtype=torch.float32, device=self.device)
        measured = None
        for k in range(self.hyper.accumulation):
            self.ctx.enter(f"step {s} micro {k}")
            loss = self.micro(engine, s, k)
            engine.backward(loss)
            if k == self.hyper.accumulation - 1 and not engine.zero_optimization():
                # stage 0 clips without keeping the norm: read the gradients
                measured = _grad_norm(engine.module)
            engine.step()
            window += loss.detach().float()
        norm = engine.get_global_grad_norm()
        norm = float(norm) if norm is not None else measured
        # Muon: ZeRO takes the norm over the orthogonalised update, by design, not over the gradients
        if self.hyper.muon:
            norm = None
        return StepRecord(self.global_loss(window), norm, lr, self.params())

    def params(self) -> dict[str, Any]:
        import torch

        return {n: v.to(torch.float32) for n, v in full_values(self.engine.module).items()}

    def built(self) -> Any:
        """What the engine was asked for (its config as it read it) and the optimizer it built
        (`checks.BuiltOptimizer`)."""
        from ds_doctor.plugins.checks import BuiltOptimizer

        return BuiltOptimizer.of(self.engine)

    def offload_and_reload(self) -> None:
        """The engine's states moved to the CPU and back (`offload_states`, `reload_states`), as an RLHF job does
        between its training and generation phases."""
        self.engine.offload_states()
        self.engine.reload_states()

    def close(self) -> None:
        self.engine.destroy()

    def save(self, directory: Path) -> None:
        self.engine.save_checkpoint(str(directory), tag="resume")

    def load(self, directory: Path) -> None:
        self.engine.load_checkpoint(
            str(directory),
            tag="resume",
            load_optimizer_states="optimizer" not in self.route.drop,
            load_lr_scheduler_states="scheduler" not in self.route.drop,
        )

    def optimizer(self) -> Any:
        return self.engine.optimizer

    def scheduler_step(self) -> int | None:
        scheduler = self.engine.lr_scheduler
        return None if scheduler is None else int(getattr(scheduler, "last_batch_iteration", -2))


def _sync_each_batch(ctx: ProbeContext, steps: int) -> Any:
    """`GradientAccumulationPlugin(num_steps, sync_each_batch=True)`; a skip on a release without the flag (it came
    in Accelerate 0.28.0)."""
    import dataclasses

    try:
        from accelerate.utils import GradientAccumulationPlugin
    except ImportError:
        ctx.skip("this Accelerate has no GradientAccumulationPlugin (sync_each_batch came in 0.28.0)")
    if "sync_each_batch" not in {f.name for f in dataclasses.fields(GradientAccumulationPlugin)}:
        ctx.skip("this Accelerate's GradientAccumulationPlugin has no sync_each_batch (it came in 0.28.0)")
    return GradientAccumulationPlugin(num_steps=steps, sync_each_batch=True)


def _group_kwargs(backend: str) -> Any:
    """Accelerate's process-group settings naming `backend`: a field since Accelerate 0.19; before, Accelerate chose
    it itself (gloo on a CPU), so older releases (the corpus's) run the route too."""
    import dataclasses

    from accelerate.utils import InitProcessGroupKwargs

    fields = {f.name for f in dataclasses.fields(InitProcessGroupKwargs)}
    return InitProcessGroupKwargs(backend=backend) if "backend" in fields else InitProcessGroupKwargs()


def linear_schedule(optimizer: Any) -> Any:
    """transformers' `get_linear_schedule_with_warmup` as the user's loop builds it: a `LambdaLR` over the documented
    factor (`knobs.linear_factor`), stepped once per optimizer step."""
    import torch

    from ds_doctor.probes.equivalence.knobs import linear_factor

    return torch.optim.lr_scheduler.LambdaLR(optimizer, linear_factor)


def sequential_schedule(optimizer: Any) -> Any:
    """torch's `SequentialLR` as its docs write one: a `LinearLR` warm-up, then a `CosineAnnealingLR` from the
    milestone (`knobs.sequential_factor`), stepped once per optimizer step."""
    import torch

    from ds_doctor.probes.equivalence import knobs

    sched = torch.optim.lr_scheduler
    warm = sched.LinearLR(optimizer, start_factor=knobs.SEQUENTIAL_START, total_iters=knobs.WARMUP)
    cosine = sched.CosineAnnealingLR(optimizer, T_max=knobs.TOTAL - knobs.WARMUP)
    return sched.SequentialLR(optimizer, [warm, cosine], milestones=[knobs.WARMUP])


def nested_schedule(optimizer: Any) -> Any:
    """`sequential_schedule` the one child of an outer `SequentialLR` without milestones, as a framework wraps the
    scheduler a user hands it: its docs make that wrapper a no-op (torch issue #196243: it is not)."""
    import torch

    return torch.optim.lr_scheduler.SequentialLR(optimizer, [sequential_schedule(optimizer)], milestones=[])


#: the torch schedulers a route builds over its optimizer, by `Hyper.schedule`
SCHEDULE_BUILDERS = {"linear": linear_schedule, "sequential": sequential_schedule, "nested": nested_schedule}


def torch_schedule(hyper: Hyper) -> Any:
    """The builder of the torch scheduler `hyper`'s schedule names, or None (constant; DeepSpeed's own)."""
    return SCHEDULE_BUILDERS.get(hyper.schedule)


def _grad_norm(module: Any) -> float:
    import torch

    grads = [p.grad.detach().float() for p in module.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


class EpochBatchSampler:
    """A job's own batch sampler, as bucketing and no-duplicates samplers are: each `set_epoch(e)` makes epoch `e`
    one permutation of the samples drawn from a generator seeded with `seed + e` (the seedable sampler's order),
    yielded in batches of `batch_size`. Only `set_epoch` moves it to another epoch."""

    def __init__(self, samples: int, batch_size: int, seed: int) -> None:
        self.samples, self.batch_size, self.seed, self.epoch = samples, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.samples // self.batch_size

    def __iter__(self) -> Iterator[list[int]]:
        import torch

        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.samples, generator=generator).tolist()
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            yield order[start : start + self.batch_size]


class LoaderRanOut(Exception):
    """A prepared DataLoader's epoch ended before the documented sharding ends it (batches larger than documented):
    a real loop's `for batch in loader` takes fewer steps an epoch. The route's steps end here (`probe.train`)."""


class AccelerateSession(Session):
    """Accelerator(gradient_accumulation_steps=...) with `accelerator.accumulate`, `accelerator.backward`,
    `accelerator.clip_grad_norm_` and the prepared optimizer (and scheduler), as Accelerate's docs write the loop;
    with a DeepSpeed plugin the engine does the accumulation and clipping from its config."""

    def __init__(
        self,
        ctx: ProbeContext,
        route: Route,
        subject: Subject,
        hyper: Hyper,
        plugin_config: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        schedule: Any = None,
    ) -> None:
        import torch
        from accelerate import Accelerator
        from accelerate.state import AcceleratorState
        from accelerate.utils import DeepSpeedPlugin

        super().__init__(ctx, route, subject, hyper)
        ctx.enter("prepare")
        kwargs = dict(extra or {})
        if plugin_config is not None:
            kwargs["deepspeed_plugin"] = DeepSpeedPlugin(hf_ds_config=plugin_config)
        elif route.sync_each_batch:
            kwargs["gradient_accumulation_plugin"] = _sync_each_batch(ctx, hyper.accumulation)
        else:
            kwargs.setdefault("gradient_accumulation_steps", hyper.accumulation)
        # on CPU Accelerate sees the process group only with cpu=True, which drops a DeepSpeed plugin (measured)
        cpu = ctx.device_kind == "cpu" and "deepspeed_plugin" not in kwargs
        AcceleratorState._reset_state()
        self.accelerator = Accelerator(cpu=cpu, kwargs_handlers=[_group_kwargs(ctx.backend)], **kwargs)
        if route.knobs is not None and plugin_config is None:
            self.dtype = torch.float32  # the model stays fp32: Accelerate's bf16 is autocast
        self.module = hyper.module(subject, ctx.world_size)
        optimizer = hyper.optimizer(self.module)
        self.scheduler = schedule(optimizer) if schedule is not None else None
        prepared = [self.module, optimizer] + (
            [self.scheduler] if self.scheduler is not None and "scheduler" not in route.drop else []
        )
        # its batch sizes are checked against a prepared dataloader, as in a real job
        if plugin_config is not None:
            loader = torch.utils.data.DataLoader(
                torch.utils.data.TensorDataset(torch.zeros(8, 1)), batch_size=hyper.micro_batch
            )
            prepared.append(loader)
        out = self.accelerator.prepare(*prepared)
        self.model, self.opt = out[0], out[1]
        self.loader: Any = None
        self.batches: Any = None
        # the "shuffle" knob: sample indices from a prepared, shuffled DataLoader; the partial window: from a prepared
        # sequential one whose epoch ends one micro-batch into its last window (`accumulate()` syncs at its end)
        if hyper.shuffle or hyper.partial_window:
            from accelerate.utils import set_seed

            from ds_doctor.probes.equivalence.knobs import SHUFFLE_SEED, epoch_micro_batches

            self.samples = (
                epoch_micro_batches(hyper.accumulation, hyper.partial_window)
                * hyper.micro_batch
                * ctx.world_size
            )
            # as a job sets it before building its data; "rank_seeds": each rank its own (device_specific)
            set_seed(SHUFFLE_SEED, device_specific=route.knobs is not None and route.knobs.rank_seeds)
            dataset = torch.utils.data.TensorDataset(torch.arange(self.samples))
            if not hyper.shuffle:
                loader = torch.utils.data.DataLoader(dataset, batch_size=hyper.micro_batch)
            elif route.knobs is not None and route.knobs.batch_sampler:  # the job's own batch sampler
                own = EpochBatchSampler(self.samples, hyper.micro_batch, SHUFFLE_SEED)
                loader = torch.utils.data.DataLoader(dataset, batch_sampler=own)
            else:  # "split": the global micro-batch, for Accelerate to split between the processes
                split = route.knobs is not None and route.knobs.split != "none"
                size = hyper.micro_batch * (ctx.world_size if split else 1)
                loader = torch.utils.data.DataLoader(dataset, batch_size=size, shuffle=True)
            self.loader = self.accelerator.prepare(loader)
        if self.scheduler is not None and "scheduler" not in route.drop:
            self.scheduler = out[2]
        self.engine = self.model if plugin_config is not None else None

    def step(self, s: int) -> StepRecord:
        import torch

        from ds_doctor.probes.equivalence.knobs import epoch_window

        accelerator, norm = self.accelerator, None
        lr = float(self.opt.param_groups[0]["lr"]) if self.engine is None else float(self.engine.get_lr()[0])
        window = torch.zeros((), dtype=torch.float32, device=accelerator.device)
        micros = epoch_window(s, self.hyper.accumulation, self.hyper.partial_window)
        for k in range(micros):
            self.ctx.enter(f"step {s} micro {k}")
            indices = self.next_indices(s, k)  # fetched before accumulate(), as `for batch in loader` does
            with accelerator.accumulate(self.model):
                loss = self.micro(self.model, s, k, indices)
                accelerator.backward(loss)
                if accelerator.sync_gradients and self.engine is None:
                    norm = accelerator.clip_grad_norm_(
                        self.model.parameters(), self.hyper.clip or float("inf")
                    )
                self.opt.step()
                # Accelerate's documented loop steps the scheduler at every micro-batch (it counts the skipped ones)
                if self.scheduler is not None and (
                    accelerator.sync_gradients or self.route.knobs is not None
                ):
                    self.scheduler.step()
                self.opt.zero_grad()
            window += loss.detach().float()
        if self.engine is not None:
            norm = self.engine.get_global_grad_norm()
        return StepRecord(
            self.global_loss(window, micros), None if norm is None else float(norm), lr, self.params()
        )

    def next_indices(self, s: int, k: int) -> list[int] | None:
        """The samples of the next micro-batch from the prepared DataLoader (None without one): a new epoch every
        EPOCH_STEPS steps, `set_epoch` called at its start, as a training loop over epochs does (not under
        "no_set_epoch": the loader counts its epochs itself, each time a loop over it runs out). A session resumed
        inside an epoch (its first draw is not an epoch's first) goes on as Accelerate's checkpointing docs write
        it: the loop's `set_epoch` for the epoch it is in (not under "no_set_epoch"), then `skip_first_batches`
        past the batches that epoch already trained."""
        from ds_doctor.probes.equivalence.knobs import EPOCH_STEPS, epoch_micro_batches

        if self.loader is None:
            return None
        epoch, within = divmod(s, EPOCH_STEPS)
        told = self.route.knobs is None or not self.route.knobs.no_set_epoch
        if within == 0 and k == 0:
            for _ in self.batches or ():  # the last epoch's loop runs out, as `for batch in loader` does
                pass
            if told:
                self.loader.set_epoch(epoch)
            self.batches = iter(self.loader)
        elif self.batches is None:  # resumed inside the epoch
            if told:
                self.loader.set_epoch(epoch)
            trained = within * self.hyper.accumulation + k
            self.batches = iter(self.accelerator.skip_first_batches(self.loader, trained))
        assert self.batches is not None
        batch = next(self.batches, None)
        if batch is None:
            raise LoaderRanOut(
                f"the prepared DataLoader ran out at step {s + 1}, micro-batch {k + 1}: epoch {epoch} gave this "
                f"process {within * self.hyper.accumulation + k} micro-batch(es) where the documented sharding "
                f"gives {epoch_micro_batches(self.hyper.accumulation, self.hyper.partial_window)}"
            )
        indices = [int(i) for i in batch[0].tolist()]
        self.drawn.append((s, k, indices))
        return indices

    def params(self) -> dict[str, Any]:
        import torch

        if self.engine is not None:
            return {n: v.to(torch.float32) for n, v in full_values(self.engine.module).items()}
        return full_params(self.module)

    def close(self) -> None:
        if self.engine is not None:
            self.engine.destroy()

    def save(self, directory: Path) -> None:
        self.accelerator.save_state(str(directory))
        self.accelerator.wait_for_everyone()

    def load(self, directory: Path) -> None:
        self.accelerator.load_state(str(directory))

    def optimizer(self) -> Any:
        return self.opt

    def scheduler_step(self) -> int | None:
        # Accelerate's AcceleratedScheduler wraps it
        inner = getattr(self.scheduler, "scheduler", self.scheduler)
        return None if inner is None else int(inner.last_epoch)


#: the torch wrappers' sessions; DeepSpeed's and Accelerate's take their config too (`sessions.open_session`)
SESSIONS: dict[Wrapper, type[TorchSession]] = {
    Wrapper.DDP: DDPSession,
    Wrapper.FSDP1: FSDP1Session,
    Wrapper.FSDP2: FSDP2Session,
}

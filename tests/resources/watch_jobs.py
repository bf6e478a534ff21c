"""Training jobs as a user writes them, each with `ds_doctor.api.watch` (or `DoctorCallback`) added, for
tests/watch/test_jobs.py to run under a real torchrun (2 ranks, gloo on CPU; nccl with a GPU per rank):

    python -m torch.distributed.run --nproc-per-node 2 tests/resources/watch_jobs.py JOB PLANT OUT_DIR [RAISE]

JOB: deepspeed (ZeRO-3, optimizer offloaded to the CPU), accelerate, trainer. PLANT: none; s1 (a frozen parameter
replaced after initialize/prepare, then a save); s4 (accelerate: an optimizer keeping a tensor in its param
groups, resumed onto `meta` parameters); ppsf (accelerate with prodigy-plus-schedule-free, for a GPU node);
deepspeed, deepspeed-s1 (accelerate driving DeepSpeed ZeRO-2; -s1 plants S1); drift (accelerate: one element of
rank 1's replica changed before step 2); main-only (accelerate: save_state and
load_state on the main process alone, the watch's out an existing folder).
Each rank writes OUT_DIR/rank<R>.json: what the job saw (the error it
stopped with, whether its checkpoint was written, whether close() left the objects as they were).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

VOCAB, WIDTH, STEPS = 32, 16, 4


class TinyLM(nn.Module):
    """An embedding (frozen in these jobs), a body and a head: the shape S1's frozen-weight bugs need."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.body = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, input_ids: Any, labels: Any = None) -> Any:
        logits = self.head(torch.tanh(self.body(self.emb(input_ids))))
        if labels is None:
            return logits
        return {
            "loss": nn.functional.cross_entropy(logits.reshape(-1, VOCAB).float(), labels.reshape(-1)),
            "logits": logits,
        }


def tiny_lm() -> TinyLM:
    torch.manual_seed(0)
    model = TinyLM()
    model.emb.weight.requires_grad_(False)
    return model


def ids(step: int, rank: int, batch: int = 2) -> tuple[Any, Any]:
    generator = torch.Generator().manual_seed(1000 * rank + step)
    tokens = torch.randint(0, VOCAB, (batch, 9), generator=generator)
    return tokens[:, :-1], tokens[:, 1:]


def replace_frozen(module: Any) -> None:
    """S1, planted: a new Parameter object for the frozen embedding (what dispatch_model or
    load_state_dict(assign=True) do after initialize)."""
    module.emb.weight = nn.Parameter(module.emb.weight.detach().clone(), requires_grad=False)


class GroupTensorSGD(torch.optim.SGD):
    """SGD that keeps a running statistic as a tensor inside each param group (as Prodigy-style optimizers do)."""

    def __init__(self, params: Any, lr: float = 0.01) -> None:
        super().__init__(params, lr=lr)
        for group in self.param_groups:
            group["running_scale"] = torch.ones((), device=group["params"][0].device)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:
            group["running_scale"].mul_(0.99)
        return super().step(closure)


def deepspeed_job(plant: str, out: Path, raise_on: str | None) -> dict[str, Any]:
    import deepspeed

    from ds_doctor.api import DoctorError, watch

    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 2,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "steps_per_print": 10**9,
        "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": False}},
    }
    model = tiny_lm()
    engine, _, _, _ = deepspeed.initialize(
        model=model, model_parameters=[p for p in model.parameters() if p.requires_grad], config=config
    )
    before = {name: vars(engine).get(name) for name in ("save_checkpoint", "load_checkpoint", "step")}
    result: dict[str, Any] = {"error": None}
    w = watch(engine, out=out / "watch.json", every=2, raise_on=raise_on)
    try:
        for step in range(STEPS * 2):  # micro steps: two accumulation windows per optimizer step
            x, y = ids(step, engine.global_rank)
            loss = engine(x.to(engine.device), labels=y.to(engine.device))["loss"]
            engine.backward(loss)
            engine.step()
        if plant == "s1":
            replace_frozen(engine.module)
        engine.save_checkpoint(str(out / "ckpt"), tag="t")
        engine.load_checkpoint(str(out / "ckpt"), tag="t")
    except DoctorError as exc:
        result["error"] = f"DoctorError: {exc}"
    finally:
        w.close()
    result["saved"] = (out / "ckpt" / "t").is_dir()
    result["restored"] = {name: vars(engine).get(name) is value for name, value in before.items()}
    return result


def _accelerator(plant: str) -> Any:
    """Accelerate driving DeepSpeed ZeRO-2 with the optimizer in the config; else plain (on CPU, torchrun's ranks
    make MULTI_CPU)."""
    from accelerate import Accelerator
    from accelerate.utils import DeepSpeedPlugin, InitProcessGroupKwargs

    if plant not in ("deepspeed", "deepspeed-s1"):
        return Accelerator(cpu=not torch.cuda.is_available())
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 10**9,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
        "zero_optimization": {"stage": 2},
    }
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    return Accelerator(
        deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config),
        kwargs_handlers=[InitProcessGroupKwargs(backend=backend)],
    )


def _optimizer(plant: str, trainable: list[Any]) -> Any:
    """The config's placeholder under DeepSpeed; S4 live on a GPU (prodigy-plus-schedule-free < 1.9.2 leaves its
    group tensors on the CPU); else an SGD that keeps a tensor in its groups."""
    from accelerate.utils import DummyOptim

    if plant in ("deepspeed", "deepspeed-s1"):
        return DummyOptim(trainable)
    if plant == "ppsf":
        from prodigyplus import ProdigyPlusScheduleFree

        return ProdigyPlusScheduleFree(trainable, lr=1.0)
    return GroupTensorSGD(trainable)


def accelerate_job(plant: str, out: Path, raise_on: str | None) -> dict[str, Any]:
    from ds_doctor.api import DoctorError, watch

    model = tiny_lm()
    trainable = [p for p in model.parameters() if p.requires_grad]
    accelerator, optimizer = _accelerator(plant), _optimizer(plant, trainable)
    model, optimizer = accelerator.prepare(model, optimizer)
    result: dict[str, Any] = {"error": None, "distributed_type": str(accelerator.distributed_type)}
    hooks_before = len(accelerator._save_model_state_pre_hook)
    w = watch(
        accelerator, out=out if plant == "main-only" else out / "watch.json", every=2, raise_on=raise_on
    )
    try:
        for step in range(STEPS):
            x, y = ids(step, accelerator.process_index)
            accelerator.backward(model(x.to(accelerator.device), labels=y.to(accelerator.device))["loss"])
            if plant == "drift" and step == 1 and accelerator.process_index == 1:
                with (
                    torch.no_grad()
                ):  # one element of one replica, as a bad memory cell or a stray write would
                    accelerator.unwrap_model(model).body.weight[0, 0] += 1e-3
            optimizer.step()
            optimizer.zero_grad()
        if plant in ("s1", "deepspeed-s1"):
            replace_frozen(accelerator.unwrap_model(model))
        if plant == "main-only":  # plain DDP allows it: the main process alone saves and loads
            if accelerator.is_main_process:
                accelerator.save_state(str(out / "state"))
            accelerator.wait_for_everyone()
            if accelerator.is_main_process:
                accelerator.load_state(str(out / "state"))
            accelerator.wait_for_everyone()
        else:
            accelerator.save_state(str(out / "state"))
            accelerator.wait_for_everyone()  # rank 0 writes the model file the other ranks then read
        if plant == "s4":
            resume_onto_meta(out)
        elif plant != "main-only":
            accelerator.load_state(str(out / "state"))
    except DoctorError as exc:
        result["error"] = f"DoctorError: {exc}"
    finally:
        w.close()
    result["saved"] = (out / "state").is_dir() and any((out / "state").iterdir())
    result["restored"] = {
        "load_state": "load_state" not in vars(accelerator),
        "step": "step" not in vars(optimizer),
        "engine": not any(name in vars(model) for name in ("save_checkpoint", "step")),
        "save_hooks": len(accelerator._save_model_state_pre_hook) == hooks_before,
    }
    return result


def resume_onto_meta(out: Path) -> None:
    """S4, planted: a second Accelerator resumes the state onto a model whose parameters are on `meta` (the second
    device a CPU has) before the optimizer is made, as tests/probes/test_optimizer_state_placement.py does. The
    per-parameter state follows the parameters; the tensor in the param group stays where it was saved (the CPU).
    The model is prepared without DDP (evaluation_mode), which cannot broadcast meta tensors."""
    from accelerate import Accelerator

    from ds_doctor.api import watch

    resumed = Accelerator(cpu=not torch.cuda.is_available(), device_placement=False)
    model = resumed.prepare_model(tiny_lm().to("meta"), device_placement=False, evaluation_mode=True)
    resumed.prepare_optimizer(GroupTensorSGD([p for p in model.parameters() if p.requires_grad]))
    with watch(resumed, out=out / "resumed.json"):
        resumed.load_state(str(out / "state"))


def trainer_job(plant: str, out: Path, raise_on: str | None) -> dict[str, Any]:
    from transformers import Trainer, TrainerCallback, TrainingArguments

    from ds_doctor.api import DoctorCallback, DoctorError

    class ReplaceBeforeSave(TrainerCallback):  # type: ignore[misc]
        """S1 without DeepSpeed, planted: the state_dict saves by module name, so what breaks is the optimizer,
        left stepping the old (trainable) object; a replaced frozen one is only a warning there."""

        def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
            if control.should_save:
                replace_frozen(model)
                model.body.weight = nn.Parameter(model.body.weight.detach().clone())

    data = [{"input_ids": x[0], "labels": y[0]} for x, y in (ids(i, 0, batch=1) for i in range(16))]
    args = TrainingArguments(
        output_dir=str(out / "trainer"),
        max_steps=STEPS,
        save_strategy="steps",
        save_steps=2,
        per_device_train_batch_size=2,
        report_to=[],
        logging_steps=1000,
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
        seed=0,
    )
    callbacks: list[Any] = [ReplaceBeforeSave()] if plant == "s1" else []
    doctor = DoctorCallback(out=out / "watch.json", every=2, raise_on=raise_on)
    trainer = Trainer(model=tiny_lm(), args=args, train_dataset=data, callbacks=[*callbacks, doctor])
    result: dict[str, Any] = {"error": None}
    try:
        trainer.train()
    except DoctorError as exc:
        result["error"] = f"DoctorError: {exc}"
    checkpoints = (
        sorted(p.name for p in (out / "trainer").glob("checkpoint-*")) if (out / "trainer").is_dir() else []
    )
    result["saved"] = bool(checkpoints)
    result["checkpoints"] = checkpoints
    result["restored"] = {"closed": bool(doctor.watch and doctor.watch.closed)}
    return result


JOBS = {"deepspeed": deepspeed_job, "accelerate": accelerate_job, "trainer": trainer_job}


def main() -> None:
    """`watch_jobs.py JOB PLANT OUT RAISE_ON [JOB PLANT OUT RAISE_ON ...]`: each job in turn in this process (a
    launch costs more than a job; a job's watch must leave the next one nothing of its own: the tests check what each
    restored), its result in OUT/rank<N>.json."""
    rank = int(os.environ.get("RANK", "0"))
    specs = sys.argv[1:]
    for i in range(0, len(specs), 4):
        job, plant, out, raise_on = specs[i : i + 4]
        result = {"rank": rank, **JOBS[job](plant, Path(out), None if raise_on == "none" else raise_on)}
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(result, default=str))
    import torch.distributed as dist

    # leave together: a rank whose peer's gloo pairs close under it at exit can abort
    if dist.is_initialized():
        dist.barrier()  # ("terminate called without an active exception", seen once per planted job in CI)
        dist.destroy_process_group()
    # and skip the C++ static destructors: after the barrier and the destroy, a ZeRO-3 offload rank still aborted
    # once in CI with the same words while the interpreter tore down (its result file was already written); what
    # the tests read is the result files and the watch reports, all written and closed by now
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

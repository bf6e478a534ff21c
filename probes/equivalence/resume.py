"""Resume, for real: N steps straight against k steps, save, a NEW process, load, N - k steps.

The case's ranks train N steps and save at step k through the route's own path (DeepSpeed `save_checkpoint`,
Accelerate `save_state`, the Trainer's checkpoint), noting what they held then. Each rank then starts a new Python
process (`python -m ds_doctor.probes.equivalence.child`), and those processes form a process group of their
own on a fresh
port: nothing of the first run survives but the files. They build the route afresh, load, note what they hold right
after the load, train the remaining N - k steps and write it all down. The case compares: what the load did not
restore (parameters, optimizer moments, lr, the scheduler's step count, the grad scaler where one is used, the RNG
where the path claims to restore it), and where the resumed steps leave the straight ones.

DeepSpeed's checkpoint holds no RNG state by design (its `client_state` is written by rank 0 alone): the DeepSpeed
path is not judged on the RNG.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from ds_doctor.plugins import ProbeContext, Wrapper
from ds_doctor.plugins.checks import Tolerance, continuation_finding, first_divergence, not_restored
from ds_doctor.probes.equivalence.cases import Route
from ds_doctor.probes.equivalence.routes import Session
from ds_doctor.probes.equivalence.subject import StepRecord, Subject, digest, gaps

CHILD_TIMEOUT_S = 150.0
PATHS = {
    Wrapper.DEEPSPEED: "DeepSpeed save_checkpoint / load_checkpoint",
    Wrapper.ACCELERATE: "Accelerate save_state / load_state",
    Wrapper.TRAINER: "the Trainer's checkpoint and train(resume_from_checkpoint=...)",
}


def resume_step(steps: int) -> int:
    """k: where the straight run saves and the new process resumes."""
    return steps // 2


def run(ctx: ProbeContext, route: Route, subject: Subject, session: Session) -> None:
    """The straight run with a save at step k, then the new process, then the comparisons."""
    from ds_doctor.probes.equivalence.invariants import Judging, judge
    from ds_doctor.probes.equivalence.sessions import follows_schedule

    hyper, k = session.hyper, resume_step(session.hyper.steps)
    directory = ctx.scratch_dir() / "checkpoint"
    records, saved = [], {}
    try:
        for s in range(hyper.steps):
            records.append(session.step(s))
            if s + 1 == k:
                ctx.enter(f"save at step {k}")
                session.save(directory)
                saved = fingerprint(session, records[-1].params, rng=route.resume is not Wrapper.DEEPSPEED)
    finally:
        session.close()
    judge(ctx, route, subject, hyper, records, Judging(schedule=follows_schedule(route)))
    loaded, resumed = spawn(ctx, k, directory)
    compare(ctx, route, saved, loaded, records, resumed, k, Tolerance(hyper.dtype))


def compare(
    ctx: ProbeContext,
    route: Route,
    saved: dict,
    loaded: dict,
    straight: list[StepRecord],
    resumed: list[StepRecord],
    k: int,
    tolerance: Tolerance,
) -> None:
    if route.resume is None:
        raise ValueError(f"{route.name} is no resume case: it has no save and load path to compare")
    path = PATHS[route.resume]
    ctx.note(
        "resume",
        {
            "path": path,
            "saved_at_step": k,
            "steps": len(straight),
            "dropped_on_purpose": list(route.drop),
            "saved": saved,
            "loaded": loaded,
        },
    )
    compared, _ = gaps(straight[k:], resumed)
    findings = not_restored(saved, loaded, path) + continuation_finding(
        first_divergence(compared, tolerance), k, len(straight), path
    )
    ctx.add_findings(findings)
    # the known issue a resume case is about: shown where the resume lost something (or the straight run showed it)
    ctx.reproduce(route.issue, caught=bool(findings))


def _base_optimizer(optimizer: Any) -> Any:
    """The optimizer that holds the state: under Accelerate's wrapper and ZeRO's."""
    seen = set()
    while getattr(optimizer, "optimizer", None) is not None and id(optimizer) not in seen:
        seen.add(id(optimizer))
        optimizer = optimizer.optimizer
    return optimizer


def optimizer_state(optimizer: Any) -> dict[str, object]:
    """Each tensor (or number) of the optimizer's per-parameter state, and its master tensors, as digests."""
    base = _base_optimizer(optimizer)
    out: dict[str, object] = {}
    try:
        states = base.state_dict()["state"].items()
    # ZeRO-3 keys its state by fp32 partitions it swaps into its groups only around a step: the state by position
    except KeyError:
        states = enumerate(base.state.values())
    for index, state in states:
        for key, value in state.items():
            local = value.to_local() if hasattr(value, "to_local") else value
            out[f"state.{index}.{key}"] = digest(local) if hasattr(local, "dtype") else repr(local)
    for g, group in enumerate(base.param_groups):
        for i, p in enumerate(group["params"]):
            out[f"group{g}.param{i}"] = digest(p.to_local() if hasattr(p, "to_local") else p)
    return out


def rng_state() -> dict[str, object]:
    """This process's generators: torch's (CPU, and CUDA where present), Python's and numpy's."""
    import hashlib
    import random

    import torch

    out: dict[str, object] = {
        "torch": digest(torch.get_rng_state()),
        "python": hashlib.sha256(repr(random.getstate()).encode()).hexdigest()[:24],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = digest(torch.cuda.get_rng_state())
    try:
        import numpy

        out["numpy"] = hashlib.sha256(repr(numpy.random.get_state()).encode()).hexdigest()[:24]
    except ImportError:
        pass
    return out


def fingerprint(session: Session, params: dict[str, Any], *, rng: bool) -> dict[str, dict[str, object]]:
    """What a process holds at one point, by category (ds_doctor.checks.equivalence.CATEGORIES)."""
    optimizer = session.optimizer()
    base = _base_optimizer(optimizer)
    out: dict[str, dict[str, object]] = {
        "parameters": {name: digest(value) for name, value in params.items()},
        "optimizer state": optimizer_state(optimizer),
        "lr": {f"group{i}": float(g["lr"]) for i, g in enumerate(base.param_groups)},
    }
    step = session.scheduler_step()
    if step is not None:
        out["scheduler step"] = {"scheduler": step}
    scaler = getattr(getattr(session, "accelerator", None), "scaler", None)
    if scaler is not None:
        out["grad scaler"] = {k: repr(v) for k, v in scaler.state_dict().items()}
    if rng:
        out["rng"] = rng_state()
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(ctx: ProbeContext, k: int, directory: Path) -> tuple[dict, list[StepRecord]]:
    """Every rank starts its new process; they meet on a port rank 0 chose. Returns this rank's fingerprint after
    the load and its resumed steps; a process that fails is this case's error, with the tail of its log."""
    import torch
    import torch.distributed as dist

    from ds_doctor.plugins.process import command

    dist.barrier()  # every rank's files are written
    port = ctx.all_gather_json(_free_port() if ctx.rank == 0 else 0)[0]
    out, log = (
        directory.parent / f"resumed-rank{ctx.rank}.pt",
        directory.parent / f"resumed-rank{ctx.rank}.log",
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("TORCHELASTIC")}
    env.update(
        RANK=str(ctx.rank),
        WORLD_SIZE=str(ctx.world_size),
        LOCAL_RANK=os.environ.get("LOCAL_RANK", str(ctx.local_rank)),  # a shared GPU's index (worker)
        LOCAL_WORLD_SIZE=str(ctx.world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    args = {
        "case": ctx.case_id,
        "resume_from": k,
        "directory": str(directory),
        "out": str(out),
        "backend": ctx.backend,
        "device": ctx.device,
        "spawned_at": time.time(),
        "options": ctx.options.to_json(),
    }
    ctx.enter("new process: load and resume")
    started = time.monotonic()
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [*command("ds_doctor.probes.equivalence.child"), json.dumps(args)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            code = proc.wait(timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
    ctx.note("resume_process_s", round(time.monotonic() - started, 2))
    if code != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(
            f"the resumed process of rank {ctx.rank} {'timed out' if code is None else f'exited {code}'}"
            f"; its log ends:\n{tail}"
        )
    data = torch.load(out, weights_only=True)
    ctx.note("resume_process_timing", data.get("timing"))
    return data["fingerprint"], [StepRecord(**r) for r in data["records"]]

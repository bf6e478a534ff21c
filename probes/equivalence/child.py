"""The resumed half of an equivalence resume case: `python -m ds_doctor.probes.equivalence.child '<json>'` is
one rank of
the new process group `ds_doctor.probes.equivalence.resume.spawn` starts. It builds the route afresh, loads
the checkpoint,
notes what it holds and trains the remaining steps, writing it all to a file the case's rank reads back."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from ds_doctor.plugins import ProbeContext, RankOptions, Wrapper
from ds_doctor.probes.equivalence import trainer as equivalence_trainer
from ds_doctor.probes.equivalence.cases import Route
from ds_doctor.probes.equivalence.resume import fingerprint
from ds_doctor.probes.equivalence.sessions import open_session
from ds_doctor.probes.equivalence.subject import current_subject
from ds_doctor.probes.shared.common import accelerate_session


def resume_child(ctx: ProbeContext, k: int, directory: Path) -> dict[str, Any]:
    """In the new process: the route afresh, the load, what it holds, the remaining steps."""
    route: Route = ctx.params
    if route.wrapper is Wrapper.TRAINER:
        return equivalence_trainer.resume_child(ctx, route, k, directory)
    timing: dict[str, float] = {}
    with accelerate_session():
        started = time.monotonic()
        session = open_session(ctx, route, current_subject(ctx.options, route.model))
        timing["build_s"] = round(time.monotonic() - started, 2)
        try:
            session.load(directory)
            loaded = fingerprint(session, session.params(), rng=route.resume is not Wrapper.DEEPSPEED)
            timing["load_s"] = round(time.monotonic() - started - timing["build_s"], 2)
            records = [session.step(s) for s in range(k, session.hyper.steps)]
        finally:
            session.close()
    return {"fingerprint": loaded, "records": [r.to_dict() for r in records], "timing": timing}


def main(argv: list[str] | None = None) -> int:
    """`python -m ds_doctor.probes.equivalence.child '<json>'`: one rank of the new process group."""
    import torch
    import torch.distributed as dist

    from ds_doctor.plugins.process import end_with_parent, find_case

    started = time.monotonic()
    end_with_parent()
    parser = argparse.ArgumentParser(description="ds-doctor equivalence: the resumed half of a resume case")
    parser.add_argument("args")
    args = json.loads(parser.parse_args(argv).args)
    to_main = round(time.time() - float(args.get("spawned_at", time.time())), 2)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args["backend"] == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend=args["backend"])
    # the case's own run options, not this process's environment
    options = RankOptions.from_json(args["options"])
    case = find_case(args["case"], options)
    ctx = ProbeContext(
        case_id=case.id,
        params=case.params,
        rank=rank,
        world_size=world_size,
        local_rank=int(os.environ["LOCAL_RANK"]),
        device=args["device"],
        backend=args["backend"],
        options=options,
    )
    result = resume_child(ctx, int(args["resume_from"]), Path(args["directory"]))
    result.setdefault("timing", {}).update(start_s=to_main, process_s=round(time.monotonic() - started, 2))
    with open(args["out"], "wb") as handle:
        torch.save(result, handle)
        handle.flush()
        os.fsync(handle.fileno())
    dist.barrier()  # every rank's result is written before any of them leaves the group
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # the result is on disk: skip the interpreter's teardown (DeepSpeed's and gloo's threads take seconds to wind
    # down, measured ~3.5 s here), which nothing of the case depends on
    os._exit(code)

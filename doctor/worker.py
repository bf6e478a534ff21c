"""The per-rank entry point that `torchrun` starts: runs many cases in one process group.

Each rank writes a heartbeat (case and stage, replaced atomically) and one JSON line per case
to its own file, flushed and fsynced, so a hang is pinned to a stage and a killed launch loses
nothing that finished. A case's exception is that case's `error`, never the launch's end.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from doctor.context import ProbeContext, SkipCase
from doctor.files import log_tail, write_atomic
from doctor.invariants import ERROR
from doctor.outcomes import Outcome
from doctor.procs import die_with_parent

TRACEBACK_CHARS = 8000


#: The heartbeat name outside any case: start-up (process group) and shutdown.
LAUNCH = "<launch>"


def setup_name(probe: str) -> str:
    """The heartbeat name of a probe's one-off setup (it runs outside any case)."""
    return f"<setup {probe}>"


def setup_probe(name: str) -> str | None:
    """The probe whose setup a heartbeat name stands for, or None."""
    match = re.match(r"<setup (\w+)>$", name)
    return match.group(1) if match else None


def result_line(case_id: str, rank: int, world_size: int, outcome: Outcome, reason: str | None, stage: str | None,
                **fields: Any) -> dict[str, Any]:
    """One rank's JSON line for one case; `fields` fill or override the empty defaults."""
    return {
        "case": case_id, "rank": rank, "world_size": world_size, "outcome": outcome.value, "reason": reason,
        "stage": stage, "duration_s": 0.0, "findings": [], "device_map": [], "notes": {}, "error": None, **fields,
    }


class Heartbeat:
    def __init__(self, path: Path, rank: int) -> None:
        self.path = path
        self.rank = rank
        self.case = ""
        self.case_started = time.time()

    def start_case(self, case: str, stage: str = "start") -> None:
        self.case = case
        self.case_started = time.time()
        self.beat(stage)

    def beat(self, stage: str) -> None:
        beat = {"rank": self.rank, "case": self.case, "stage": stage, "case_started": self.case_started, "time": time.time()}
        write_atomic(self.path, json.dumps(beat), fsync=False)


class ResultWriter:
    """One JSON line per case, flushed and fsynced before the next case starts."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a", encoding="utf-8")

    def write(self, line: dict[str, Any]) -> None:
        self.file.write(json.dumps(line, default=str) + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())


def error_info(exc: BaseException) -> dict[str, str]:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {"type": type(exc).__name__, "message": str(exc), "traceback": text[-TRACEBACK_CHARS:]}


def rank_outcome(findings_failed: bool, reproduce: bool, shown: bool = False) -> Outcome:
    """pass/fail from the error findings; for a reproduce case: xfail when the invariants caught
    it, fail when it showed (`ctx.showed`) and they did not, xpass when it did not show."""
    if reproduce:
        if findings_failed:
            return Outcome.XFAIL
        return Outcome.FAIL if shown else Outcome.XPASS
    return Outcome.FAIL if findings_failed else Outcome.PASS


def run_case(module: Any, ctx: ProbeContext, reproduce: bool, log_path: Path | None = None) -> dict[str, Any]:
    """Run one case on this rank and return its result line (with this rank's log tail on an error)."""
    started = time.perf_counter()
    error = None
    reason = None
    tail = None
    try:
        module.run(ctx)
        failed = any(f.severity == ERROR for f in ctx.findings)
        outcome = rank_outcome(failed, reproduce, bool(ctx.shown))
        if failed:
            reason = "; ".join(f.message for f in ctx.findings if f.severity == ERROR)[:2000]
        elif outcome == Outcome.FAIL:
            reason = "showed, but no invariant caught it first: " + "; ".join(ctx.shown)[:2000]
    except SkipCase as exc:
        outcome, reason = Outcome.SKIP, str(exc)
    except Exception as exc:  # every exception of a case becomes its result
        outcome, error = Outcome.ERROR, error_info(exc)
        reason = f"{error['type']}: {error['message']}"[:2000]
        if log_path is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            tail = log_tail(log_path) or None
    return result_line(
        ctx.case_id, ctx.rank, ctx.world_size, outcome, reason, ctx.stage,
        device=ctx.device,
        duration_s=round(time.perf_counter() - started, 3),
        findings=[f.to_dict() for f in ctx.findings],
        device_map=[r.to_dict() for r in ctx.records],
        notes=ctx.notes,
        shown=ctx.shown,
        known_issue=ctx.issue,
        error=error,
        stderr_tail=tail,
    )


def setup_failure_line(ctx: ProbeContext, failure: dict[str, str]) -> dict[str, Any]:
    reason = f"probe setup failed: {failure['type']}: {failure['message']}"[:2000]
    return result_line(ctx.case_id, ctx.rank, ctx.world_size, Outcome.ERROR, reason, "setup", device=ctx.device,
                       error=failure)


def redirect_output(log_path: Path) -> None:
    """Send this rank's stdout/stderr (libraries print a lot) to its own log file."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def init_distributed(backend: str, local_rank: int) -> str:
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    else:
        device = "cpu"
    dist.init_process_group(backend=backend)
    return device


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ds-doctor rank worker (started by torchrun)")
    parser.add_argument("--launch-dir", required=True, type=Path)
    parser.add_argument("--backend", required=True, choices=("gloo", "nccl"))
    args = parser.parse_args(argv)

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    launch_dir: Path = args.launch_dir
    redirect_output(launch_dir / f"rank{rank}.log")
    faulthandler.enable()  # a segfault or abort leaves the Python stack in this rank's log
    die_with_parent()  # torchrun SIGKILLed: this rank goes too
    case_ids: list[str] = json.loads((launch_dir / "cases.json").read_text())["cases"]
    heartbeat = Heartbeat(launch_dir / f"heartbeat-rank{rank}.json", rank)
    heartbeat.start_case(LAUNCH, "init_process_group")
    device = init_distributed(args.backend, local_rank)
    writer = ResultWriter(launch_dir / f"rank{rank}.jsonl")

    import torch.distributed as dist

    import probes

    done_setup: dict[str, dict[str, str] | None] = {}
    for case_id in case_ids:
        case = probes.find_case(case_id)
        module = probes.get(case.probe)
        ctx = ProbeContext(
            case_id=case.id, params=case.params, rank=rank, world_size=world_size, local_rank=local_rank,
            device=device, backend=args.backend, heartbeat=heartbeat.beat, scratch=launch_dir / "scratch",
        )
        if case.probe not in done_setup:
            heartbeat.start_case(setup_name(case.probe), "setup")
            try:
                if hasattr(module, "setup"):
                    module.setup(ctx)
                done_setup[case.probe] = None
            except Exception as exc:
                done_setup[case.probe] = error_info(exc)
        heartbeat.start_case(case.id)
        failure = done_setup[case.probe]
        log_path = launch_dir / f"rank{rank}.log"
        writer.write(setup_failure_line(ctx, failure) if failure else run_case(module, ctx, case.reproduce, log_path))
        heartbeat.beat("finished")
        dist.barrier()
    heartbeat.start_case(LAUNCH, "shutdown")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

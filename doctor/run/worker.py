"""The per-rank entry point that `torchrun` starts: runs many cases in one process group.

Each rank writes a heartbeat (case and stage, replaced atomically) and one rank line per case to
its own file, flushed and fsynced, so a hang is pinned to a stage and a killed launch loses
nothing that finished. A line holds what happened (how the case ended, its findings, what showed), never its
outcome: the parent's judge decides that (`ds_doctor.run.judge`). A case's exception ends that case, never the launch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import faulthandler
import gc
import json
import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ds_doctor.cluster.exchange import rendezvous_store
from ds_doctor.files import log_tail, write_atomic
from ds_doctor.forensics import capture
from ds_doctor.probe import registry
from ds_doctor.probe.context import ProbeContext, SkipCase
from ds_doctor.probe.rankoptions import DEFAULTS, RankOptions
from ds_doctor.probe.spec import Case, missing_dependency
from ds_doctor.procs import die_with_parent
from ds_doctor.reports.model import ErrorInfo
from ds_doctor.run import cpufacts
from ds_doctor.rundir import LAUNCH, WAITING_TURN, Beat, Ended, How, LaunchDir, RankLine, setup_name


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
        write_atomic(
            self.path,
            Beat(self.rank, self.case, stage, self.case_started, time.time(), os.getpid()).to_json(),
            fsync=False,
        )


class LineWriter:
    """One rank line per case, flushed and fsynced before the next case starts."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("a", encoding="utf-8")

    def write(self, line: RankLine) -> None:
        self.file.write(line.to_json() + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())


def _raised(exc: BaseException) -> tuple[Ended, int | None]:
    """How a case that raised ended, and the code a sys.exit() of user code (a --model factory) would have exited the
    rank with, as sys.exit sets it."""
    if not isinstance(exc, SystemExit):
        return Ended(How.RAISED), None
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return Ended(How.EXITED, said=repr(exc.code)), code


def run_case(module: Any, ctx: ProbeContext, log_path: Path | None = None) -> RankLine:
    """Run one case on this rank and return its line: how it ended and what the probe recorded (with this rank's log
    tail on an error). The parent judges it (`ds_doctor.run.judge`)."""
    started = time.perf_counter()
    ctx.restart_clock()
    ended, error, tail, exit_code = Ended(How.RETURNED), None, None, None
    try:
        module.run(ctx)
    except SkipCase as exc:
        ended = Ended(How.SKIPPED, said=str(exc))
    except (Exception, SystemExit) as exc:
        # every exception of a case becomes its result; so does the sys.exit() of user code, which ended the rank
        (ended, exit_code), error = _raised(exc), ErrorInfo.of(exc)
        if log_path is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            tail = log_tail(log_path) or None
    issue, issue_shown = ctx.issue or (None, False)
    return RankLine(
        ctx.case_id,
        ctx.rank,
        ctx.world_size,
        stage=ctx.stage,
        ended=ended,
        device=ctx.device,
        duration_s=round(time.perf_counter() - started, 3),
        findings=tuple(ctx.findings),
        device_map=tuple(ctx.records),
        notes=ctx.notes,
        measures=ctx.measures,
        series=tuple(ctx.series),
        shown=tuple(ctx.shown),
        shown_notes=tuple(ctx.shown_notes),
        known_issue=issue,
        issue_shown=issue_shown,
        instead=ctx.instead,
        error=error,
        stderr_tail=tail,
        exit_code=exit_code,
        stages=ctx.stage_times(),
    )


def on_node(line: RankLine, node: int | None) -> RankLine:
    """A multi-node run's line: it, every record and every finding carry the node its rank ran on."""
    if node is None:
        return line

    def stamp(items: tuple) -> tuple:
        return tuple(dataclasses.replace(item, node=node) for item in items)

    findings = tuple(dataclasses.replace(f, node=node, evidence=stamp(f.evidence)) for f in line.findings)
    return dataclasses.replace(line, node=node, findings=findings, device_map=stamp(line.device_map))


TURN_POLL_S = 0.05
SHARE_WAIT_S = 540.0  # the store client's timeout: every rank has reached a case's barrier long before


class NodeShare:
    """Across nodes: every rank's line reaches every node's launch directory through torchrun's rendezvous store
    (the parent on each node reads rank<R>.jsonl for every rank), and each node learns where every rank runs."""

    def __init__(
        self, launch: LaunchDir, rank: int, world_size: int, local_rank: int, node: int | None
    ) -> None:
        self.store = rendezvous_store(SHARE_WAIT_S)
        self.launch = launch
        self.store.set(f"rank/{rank}", json.dumps({"node": node, "host": socket.gethostname()}))
        self.remote: list[
            int
        ] = []  # the ranks whose lines this rank collects: another node's, on local rank 0
        if local_rank == 0:
            self.store.wait([f"rank/{r}" for r in range(world_size)])
            ranks = {r: json.loads(self.store.get(f"rank/{r}")) for r in range(world_size)}
            self.launch.ranks.write_text(json.dumps(ranks))
            self.remote = [r for r, where in ranks.items() if where["node"] != node]

    def put(self, line: RankLine) -> None:
        self.store.set(f"line/{line.case}/{line.rank}", line.to_json())

    def collect(self, case_id: str) -> None:
        """After the case's barrier: the other nodes' lines for it, appended to their files here."""
        for rank in self.remote:
            with self.launch.rank_lines(rank).open("a", encoding="utf-8") as handle:
                handle.write(self.store.get(f"line/{case_id}/{rank}").decode() + "\n")


def unrun_line(ctx: ProbeContext, ended: Ended, stage: str, error: ErrorInfo | None = None) -> RankLine:
    """The line of a case whose probe never ran here: a requirement missing on this node (skipped), or its probe's
    setup failed (with the setup's error)."""
    return RankLine(
        ctx.case_id, ctx.rank, ctx.world_size, stage=stage, ended=ended, device=ctx.device, error=error
    )


def redirect_output(log_path: Path) -> None:
    """Send this rank's stdout/stderr (libraries print a lot) to its own log file."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def gpu_environment(
    local_rank: int, gpus: int, shared_gpu: str | None, environ: Mapping[str, str]
) -> dict[str, str]:
    """What a rank on a GPU sets in its environment before the process group: with several ranks to a GPU, local rank
    r takes GPU r mod `gpus`; with `nccl-hostid` it names its own host to NCCL; and where its GPU is not GPU
    `local_rank`, LOCAL_RANK becomes that GPU's index, since DeepSpeed, Accelerate and the Trainer each take their
    GPU from LOCAL_RANK (`set_device(local_rank)`): local rank 1 of a one-GPU node is otherwise "invalid device
    ordinal" (seen on an H100, 2026-11-26, docs/gpu-runs.md)."""
    index = local_rank % max(gpus, 1)
    changes = {"LOCAL_RANK": str(index)} if index != local_rank else {}
    if shared_gpu == "nccl-hostid":
        changes["NCCL_HOSTID"] = f"ds-doctor-rank{environ.get('RANK', local_rank)}"
    return changes


def init_distributed(backend: str, local_rank: int, shared_gpu: str | None = None) -> str:
    """The process group up, and this rank's device (`gpu_environment` says how ranks share GPUs)."""
    import torch
    import torch.distributed as dist

    if backend == "nccl" or shared_gpu:
        gpus = torch.cuda.device_count()
        os.environ.update(gpu_environment(local_rank, gpus, shared_gpu, os.environ))
        index = local_rank % max(gpus, 1)
        torch.cuda.set_device(index)
        device = f"cuda:{index}"
    else:
        device = "cpu"
    dist.init_process_group(backend=backend)
    return device


class Worker:
    """One rank of a launch: the cases in order, each probe's setup once before its first case."""

    def __init__(
        self,
        launch: LaunchDir,
        backend: str,
        rank: int,
        world_size: int,
        local_rank: int,
        options: RankOptions = DEFAULTS,
        shared_gpu: str | None = None,
        takes_turns: bool = False,
    ) -> None:
        self.launch, self.backend, self.options, self.shared_gpu = launch, backend, options, shared_gpu
        # the launch runs beside others: the first case that runs alone waits for the parent's turn
        self.takes_turns = takes_turns
        self.node = options.node_rank
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.heartbeat = Heartbeat(launch.heartbeat(rank), rank)
        self.setups: dict[str, ErrorInfo | None] = {}
        self.device = "cpu"

    def context(self, case: Case) -> ProbeContext:
        return ProbeContext(
            case_id=case.id,
            params=case.params,
            rank=self.rank,
            world_size=self.world_size,
            local_rank=self.local_rank,
            device=self.device,
            backend=self.backend,
            heartbeat=self.heartbeat.beat,
            scratch=self.launch.scratch,
            options=self.options,
        )

    def setup(self, case: Case, module: Any, ctx: ProbeContext) -> ErrorInfo | None:
        """The probe's one-off setup, before its first case (a failure fails each of its cases)."""
        if case.probe not in self.setups:
            self.heartbeat.start_case(setup_name(case.probe), "setup")
            try:
                if hasattr(module, "setup"):
                    with ctx.setting_up():  # its stages are the setup's, never the case's (`StageKind`)
                        module.setup(ctx)
                self.setups[case.probe] = None
            except Exception as exc:
                self.setups[case.probe] = ErrorInfo.of(exc)
        return self.setups[case.probe]

    def line_for(self, case: Case, module: Any, ctx: ProbeContext) -> RankLine:
        """The case run on this rank, or why it was not: a requirement missing here, a failed setup."""
        # across nodes the plan could not see this node's packages
        missing = missing_dependency(module.SPEC.requires)
        if missing:
            self.heartbeat.start_case(case.id)
            return unrun_line(ctx, Ended(How.SKIPPED, said=missing), "start")
        failure = self.setup(case, module, ctx)
        self.heartbeat.start_case(case.id)
        if failure:
            return unrun_line(ctx, Ended(How.SETUP_FAILED), "setup", failure)
        return run_case(module, ctx, self.launch.rank_log(self.rank))

    def await_turn(self) -> None:
        """Wait (idle) until the parent gives this launch its turn to run alone: every other running launch of the
        run is waiting for its own (`ds_doctor.run.groups`)."""
        self.heartbeat.start_case(LAUNCH, WAITING_TURN)
        while not self.launch.alone_turn.exists():
            time.sleep(TURN_POLL_S)
        self.takes_turns = False

    def prepare(self) -> None:
        """Each probe's optional `prepare(rank)`, at the launch's start, before the rank starts a thread of its own
        (a probe may fork a helper process there): work that can run beside the start-up. Its failure is left for
        the probe's cases to meet (a launch file that does not read is `run`'s to say)."""
        self.heartbeat.start_case(LAUNCH, "prepare")
        try:
            probes = [registry.get(registry.CaseEntry.from_dict(e).probe) for e in self.launch.read_entries()]
        except Exception:
            return
        for module in dict.fromkeys(probes):
            prepare = getattr(module, "prepare", None)
            if prepare is not None:
                with contextlib.suppress(Exception):
                    prepare(self.rank)

    def run(self, across_nodes: bool = False) -> None:
        import torch.distributed as dist

        self.heartbeat.start_case(LAUNCH, "init_process_group")
        entries = self.launch.read_entries()
        share = (
            NodeShare(self.launch, self.rank, self.world_size, self.local_rank, self.node)
            if across_nodes
            else None
        )
        self.device = init_distributed(self.backend, self.local_rank, self.shared_gpu)
        writer = LineWriter(self.launch.rank_lines(self.rank))
        modules = 0
        for entry in entries:
            modules = settle_heap(modules)
            case = registry.resolve(registry.CaseEntry.from_dict(entry), self.options)
            module = registry.get(case.probe)
            if self.takes_turns and case.alone:
                self.await_turn()
            line = on_node(self.line_for(case, module, self.context(case)), self.node)
            writer.write(line)
            if share is not None:
                share.put(line)
            self.heartbeat.beat("finished")
            dist.barrier()
            if share is not None:
                share.collect(case.id)
        self.heartbeat.start_case(LAUNCH, "shutdown")
        dist.destroy_process_group()


def settle_heap(modules: int) -> int:
    """Before a case: when the cases before it imported modules (torch, DeepSpeed, transformers: ~350,000 objects
    that live as long as the process), collect once and move what survives out of the collector's sight
    (`gc.freeze`). A full collection then costs what the case itself allocated, not the imported libraries: DeepSpeed
    collects explicitly (`see_memory_usage(..., force=True)` runs `gc.collect()` four times or more in each
    BF16_Optimizer's set-up, ~0.17 s each over those imports on this 2-core VM). Nothing unreachable is frozen, and
    the library's own collections still free what each case leaves. Returns the module count it saw."""
    now = len(sys.modules)
    if now > modules:
        gc.collect()
        gc.freeze()
    return now


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ds-doctor rank worker (started by torchrun)")
    parser.add_argument("--launch-dir", required=True, type=Path)
    parser.add_argument("--backend", required=True, choices=("gloo", "nccl"))
    parser.add_argument("--shared-gpu", choices=("nccl-hostid", "gloo"), help="ranks share GPUs, this way")
    parser.add_argument("--takes-turns", action="store_true", help="the launch runs beside others of the run")
    args = parser.parse_args(argv)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    launch = LaunchDir(args.launch_dir.resolve())  # absolute: a --model factory may change directory
    redirect_output(launch.rank_log(rank))
    faulthandler.enable()  # a segfault or abort leaves the Python stack in this rank's log
    die_with_parent()  # torchrun SIGKILLed: this rank goes too
    worker = Worker(
        launch,
        args.backend,
        rank,
        world_size,
        int(os.environ.get("LOCAL_RANK", "0")),
        RankOptions.read(launch.path),
        args.shared_gpu,
        args.takes_turns,
    )
    worker.prepare()  # before capture's thread: a probe's helper may be forked from this process
    capture.arm(launch, rank, args.backend)  # a hang's stacks and collective record, when the parent asks
    cpufacts.reuse()  # py-cpuinfo's answer, asked once by the parent for the run (DeepSpeed asks it ~5x per rank)
    worker.run(across_nodes=world_size > int(os.environ.get("LOCAL_WORLD_SIZE", world_size)))
    # every line is written and fsynced and the group is destroyed: leave now. The interpreter's own teardown (atexit
    # handlers, the destructors of DeepSpeed's and gloo's threads) only delays the launch's end, by a second or more
    # per launch, and gloo's thread teardown sometimes aborts ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())

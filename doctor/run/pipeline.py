"""`ds-doctor run` as a pipeline of small steps: select -> plan -> launch -> merge -> build -> write -> exit code.

Each step is a function of the last one's result, testable alone. Nothing here renders for a person: a
`RunReporter` (the console's, or none) is told what happens, and `reports/` turns the report into files.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from pathlib import Path
from typing import Any, Protocol

from ds_doctor.cluster.nodes import Cluster
from ds_doctor.hardware.env import collect_environment
from ds_doctor.ops.phase import bound_from, ensure_ops
from ds_doctor.probe import registry
from ds_doctor.probe.rankoptions import DEFAULTS, RankOptions
from ds_doctor.probe.spec import Case, Requirement, missing_dependency
from ds_doctor.redact import scrub
from ds_doctor.reports.records import CaseResult, Report, format_time
from ds_doctor.run.build import build_report, shown_result, utc_now, write_reports_of_run
from ds_doctor.run.command import rank_environment
from ds_doctor.run.groups import finish_exits, run_groups, together
from ds_doctor.run.launch import Launch, LaunchEvents
from ds_doctor.run.merge import merge_case, skipped_case
from ds_doctor.run.plan import (
    Hardware,
    LaunchGroup,
    default_nproc,
    detect_hardware,
    node_checks,
    node_world_size,
    plan,
    select_cases,
)
from ds_doctor.rundir import Manifest, PlannedCase, RankLine, RunDir
from ds_doctor.stacks.overlay import Overlay, installed


@dataclasses.dataclass(frozen=True)
class RunOptions:
    level: int = 2
    keyword: str | None = None
    out_dir: Path = Path("ds-doctor-reports")
    nproc: int | None = None
    timeout_s: float | None = None
    argv: tuple[str, ...] = ()
    anonymized: bool = False
    cluster: Cluster | None = None  # a multi-node run: this node's place in it
    overlays: tuple[
        Overlay, ...
    ] = ()  # `--with`: the stacks the selected cases run on again, after the installed one
    rank: RankOptions = DEFAULTS  # what every rank needs (the user's configs and model, thresholds, ...)
    overlays_only: bool = False  # `bisect`: the cases on the overlays alone, not on the installed stack first
    launches: str = "auto"  # how the node's launch groups run: a key of ds_doctor.run.groups.LAUNCH_MODES
    ops_ready: bool = False  # the op build phase ran for this stack (`with_ops`): its result is in `rank`


class RunReporter(Protocol):
    """Who hears about a run while it runs (the console); plain values and case results only."""

    def planned(self, total: int, device_kind: str, nproc: int, skipped: int) -> None: ...

    def note(self, line: str) -> None: ...  # a line for the person, between the plan and the first case

    def stage(self, case: str, rank: int, stage: str) -> None: ...

    def case_done(self, result: CaseResult) -> None: ...  # its line's part, scrubbed (`build.shown_result`)

    def tick(
        self,
    ) -> None: ...  # at each poll of the launches: nothing said for long, it says what still runs


class SilentReporter:
    def planned(self, total: int, device_kind: str, nproc: int, skipped: int) -> None:
        pass

    def note(self, line: str) -> None:
        pass

    def stage(self, case: str, rank: int, stage: str) -> None:
        pass

    def case_done(self, result: CaseResult) -> None:
        pass

    def tick(self) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class RunPlan:
    hardware: Hardware | None
    nproc: int
    groups: tuple[LaunchGroup, ...]
    planned: tuple[PlannedCase, ...]  # the cases the groups run, in launch order
    skips: tuple[PlannedCase, ...]  # with their reasons
    selected: tuple[
        str, ...
    ] = ()  # every case id, in the order the selection listed them (the report's order)

    @property
    def empty(self) -> bool:
        return not self.planned and not self.skips


def select(options: RunOptions, hardware: Hardware, nproc: int) -> list[Case]:
    """The registered cases that `--level`, `-k`, this node's world size and the run's nodes select. Level 1 runs
    cases only across the nodes of a multi-node run (the consistency of the nodes)."""
    across = (options.cluster.nnodes, nproc) if options.cluster else None
    cases = registry.all_cases(node_world_size(hardware, options.nproc), across, options.rank)
    selected = select_cases(cases, level=options.level, keyword=options.keyword)
    return selected if options.level >= 2 else [c for c in selected if c.nodes > 1]


def planned_case(
    case: Case,
    device_kind: str,
    skip_reason: str | None = None,
    node: int | None = None,
    shared_gpu: str | None = None,
) -> PlannedCase:
    return PlannedCase(
        case=case.id,
        probe=case.probe,
        scenario=case.scenario,
        variant=case.variant,
        world_size=case.world_size,
        level=case.level,
        reproduce=case.reproduce,
        device_kind=device_kind,
        known_issues=registry.get(case.probe).SPEC.known_issues,
        skip_reason=skip_reason,
        nodes=case.nodes,
        node=node if case.nodes == 1 else None,
        shared_gpu=shared_gpu,
    )


def make_plan(options: RunOptions, hardware: Hardware | None = None) -> RunPlan:
    """Which cases run in which launch, and which are skipped. A single-node level 1 plans nothing."""
    if options.level < 2 and options.cluster is None:
        return RunPlan(hardware, 0, (), (), ())
    hardware = hardware or detect_hardware()
    nproc = options.nproc or default_nproc(hardware)
    cases = select(options, hardware, nproc)
    groups, skips = plan(
        cases, hardware, nproc, options.rank.shared_gpu, tuple(str(o.path) for o in options.overlays)
    )
    node = options.cluster.node_rank if options.cluster else None
    return RunPlan(
        hardware,
        nproc,
        tuple(groups),
        tuple(
            planned_case(c, g.device_kind, node=node, shared_gpu=g.shared_gpu)
            for g in groups
            for c in g.cases
        ),
        tuple(planned_case(s.case, s.device_kind, s.reason, node) for s in skips),
        tuple(c.id for c in cases),
    )


def needs_deepspeed_ops(run_plan: RunPlan, options: RunOptions) -> bool:
    """Whether a planned case loads DeepSpeed's ops and DeepSpeed is there to build them (installed, or in the
    overlay the ranks import first)."""
    if not any(registry.get(p.probe).SPEC.needs_deepspeed_ops() for p in run_plan.planned):
        return False
    overlays = (options.rank.overlay,) if options.rank.overlay else ()
    return not missing_dependency((Requirement("deepspeed", "deepspeed"),), overlays)


def with_ops(run_plan: RunPlan, run_dir: RunDir, options: RunOptions, reporter: RunReporter) -> RunOptions:
    """DeepSpeed's ops ready before the first launch that needs them, as a phase of its own (`ds_doctor.ops.phase`:
    no case's clock runs meanwhile); the ranks' options name their folder, and why they are not there if they are
    not."""
    if options.ops_ready or not needs_deepspeed_ops(run_plan, options):
        return options
    env = rank_environment(options.rank, options.cluster)
    ready = ensure_ops(env, run_dir.path, reporter.note, bound_from(os.environ))
    rank = dataclasses.replace(
        options.rank, extensions_dir=ready.folder or options.rank.extensions_dir, ops_failed=ready.failure
    )
    return dataclasses.replace(options, rank=rank, ops_ready=True)


def launch(
    run_plan: RunPlan,
    run_dir: RunDir,
    versions: dict[str, str | None],
    options: RunOptions,
    reporter: RunReporter,
    host: str = "",
    stack: str | None = None,
    exiting: list[Launch] | None = None,
) -> list[CaseResult]:
    """Run every launch group; each case is merged and reported (scrubbed, as the report will hold it) the
    moment its last rank line is in. `stack`: the overlay the ranks import first (in `options.rank`), named on
    each result. `exiting`: launches whose every line is in are left there to exit (`run_groups`)."""
    options = with_ops(run_plan, run_dir, options, reporter)
    by_id = {p.case: p for p in run_plan.planned}
    merged = {s.case: dataclasses.replace(skipped_case(s), stack=stack) for s in run_plan.skips}

    def case_done(case: Case, lines: list[RankLine]) -> None:
        merged[case.id] = dataclasses.replace(merge_case(by_id[case.id], lines, versions), stack=stack)
        reporter.case_done(shown_result(merged[case.id], anonymized=options.anonymized, host=host))

    run_groups(
        run_plan.groups,
        run_dir,
        timeout_override=options.timeout_s,
        events=LaunchEvents(stage=reporter.stage, case_done=case_done, tick=reporter.tick),
        cluster=options.cluster,
        options=options.rank,
        together=together(run_plan.groups, options.launches, options.cluster is not None),
        exiting=exiting,
    )
    return [merged[case_id] for case_id in run_plan.selected]


def on_overlay(
    overlay: Overlay,
    run_plan: RunPlan,
    run_dir: RunDir,
    versions: dict[str, str | None],
    options: RunOptions,
    reporter: RunReporter,
    host: str,
    exiting: list[Launch] | None = None,
) -> list[CaseResult]:
    """The selected cases again, their ranks importing the overlay first (launches in `stack-<name>/` of the run
    directory); known issues judged on the overlay's versions."""
    stack_dir = run_dir.stack(overlay.name)
    stack_dir.path.mkdir()
    on_it = dataclasses.replace(options, rank=options.rank.with_overlay(overlay.path), ops_ready=False)
    packages = {**versions, **overlay.packages}
    return launch(run_plan, stack_dir, packages, on_it, reporter, host, overlay.name, exiting)


def stacks_section(
    versions: dict[str, str | None], overlays: tuple[Overlay, ...]
) -> tuple[dict[str, Any], ...]:
    """The report's `stacks`: the installed stack's versions of what any overlay holds, then each overlay."""
    if not overlays:
        return ()
    names = sorted({name for overlay in overlays for name in overlay.packages})
    here = {n: versions.get(n) or installed(n) for n in names}
    return (
        {"name": "installed", "with": [], "packages": here, "path": None},
        *(overlay.to_dict() for overlay in overlays),
    )


def write_manifest(
    run_dir: RunDir,
    run_plan: RunPlan,
    options: RunOptions,
    started: dt.datetime,
    env: dict[str, Any],
    hardware: dict[str, Any],
) -> None:
    run_dir.write_manifest(
        Manifest(
            started_at=format_time(started),
            level=options.level,
            argv=options.argv,
            keyword=options.keyword,
            env=scrub(env),
            hardware=scrub(hardware),
            planned=run_plan.planned,
            skips=run_plan.skips,
            stacks=stacks_section(env["packages"], options.overlays),
        )
    )


def on_every_stack(
    run_plan: RunPlan,
    options: RunOptions,
    reporter: RunReporter,
    started: dt.datetime,
    env: dict[str, Any],
    hardware: dict[str, Any],
    exiting: list[Launch],
) -> tuple[RunDir | None, list[CaseResult]]:
    """The planned cases on the installed stack, then on each overlay (`--with`), in a new run directory; none where
    nothing is planned."""
    if run_plan.empty:
        return None, []
    run_dir = RunDir.create(options.out_dir, hardware["host"], started, os.getpid())
    write_manifest(run_dir, run_plan, options, started, env, hardware)
    results: list[CaseResult] = []
    if not options.overlays_only:
        results = launch(
            run_plan, run_dir, env["packages"], options, reporter, hardware["host"], exiting=exiting
        )
    for overlay in options.overlays:
        results += on_overlay(
            overlay, run_plan, run_dir, env["packages"], options, reporter, hardware["host"], exiting
        )
    return run_dir, results


def run(options: RunOptions, reporter: RunReporter | None = None) -> tuple[Report, dict[str, Path]]:
    """The whole run on one node: the report and the paths of the files written (`ds_doctor.run.multinode.run` is the
    run across the nodes)."""
    reporter = reporter or SilentReporter()
    started = utc_now()
    options.out_dir.mkdir(parents=True, exist_ok=True)
    env, hardware = collect_environment()
    run_plan = make_plan(options)
    reporter.planned(
        len(run_plan.planned),
        run_plan.hardware.device_kind if run_plan.hardware else "-",
        run_plan.nproc,
        len(run_plan.skips),
    )
    # launches whose every line is in exit while the run goes on (the next stack's, the node checks, the report)
    exiting: list[Launch] = []
    try:
        run_dir, results = on_every_stack(run_plan, options, reporter, started, env, hardware, exiting)
        results = node_checks(env, hardware, options.keyword) + results
        report = build_report(
            started=started,
            finished=utc_now(),
            level=options.level,
            argv=options.argv,
            env=env,
            hardware=hardware,
            results=results,
            run_dir=run_dir.path if run_dir else None,
            anonymized=options.anonymized,
            stacks=stacks_section(env["packages"], options.overlays),
        )
        paths = write_reports_of_run(report, options.out_dir, run_dir.path if run_dir else None)
    except BaseException:  # Ctrl-C, or the doctor's own failure: nothing is left running
        for left in exiting:
            left.stop()
        raise
    finally:
        finish_exits(exiting)
    return report, paths

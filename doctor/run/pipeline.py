"""`ds-doctor run` as a pipeline of small steps: select -> plan -> launch -> merge -> build -> write -> exit code.

Each step is a function of the last one's result, testable alone. Nothing here renders for a person: a
`RunReporter` (the console's, or none) is told what happens, and `reports/` turns the report into files.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from ds_doctor.cluster.nodes import Cluster
from ds_doctor.hardware.env import collect_environment
from ds_doctor.ops.phase import bound_from, ensure_ops
from ds_doctor.probe import registry
from ds_doctor.probe.rankoptions import DEFAULTS, RankOptions
from ds_doctor.probe.requirements import DEEPSPEED
from ds_doctor.probe.spec import Case, missing_dependency
from ds_doctor.redact import scrub
from ds_doctor.releases.overlay import Overlay, installed
from ds_doctor.reports.model import CaseResult, Report, format_time
from ds_doctor.run.build import build_report, shown_result, utc_now, write_reports_of_run
from ds_doctor.run.command import rank_environment
from ds_doctor.run.groups import Exits, run_groups, together
from ds_doctor.run.launch import LaunchEvents
from ds_doctor.run.merge import merge_case, skipped_case
from ds_doctor.run.plan import (
    Hardware,
    LaunchGroup,
    default_nproc,
    detect_hardware,
    node_world_size,
    plan,
    run_node_checks,
    select_cases,
)
from ds_doctor.rundir import Manifest, PlannedCase, RankLine, RunDir


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Everything a run reads of its command line, as one value. The command line fills `level`, `keyword`,
    `nproc`, `timeout_s`, `anonymized` (the definitions it marks `Into.RUN`: `ds_doctor.cli_options`) and the ranks'
    options in `rank`, the rest from what it resolved (`with_given`); an option added from outside ds-doctor is in
    `added`, by name."""

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
    added: tuple[tuple[str, object], ...] = ()  # the options added from outside ds-doctor, by name

    def with_given(self, given: Mapping[str, object]) -> RunOptions:
        """These options with the values of the command line's options that fill them, by the field each fills: one
        of these fields, or (an option added from outside ds-doctor) one of `added`."""
        own = {field.name for field in dataclasses.fields(self)} - {"added"}
        added = sorted((name, value) for name, value in given.items() if name not in own)
        fields: dict[str, Any] = {name: value for name, value in given.items() if name in own}
        return dataclasses.replace(self, **fields, added=tuple(added))


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
    return not missing_dependency((DEEPSPEED,), overlays)


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


@dataclasses.dataclass(frozen=True)
class RunContext:
    """What every step of one run reads: its options, its plan, who hears of it, the environment and hardware it
    found and when it started; on one node, the launches left to exit while the run goes on (`exits`; None across
    the nodes, where each launch is awaited as it ends)."""

    options: RunOptions
    plan: RunPlan
    reporter: RunReporter
    env: dict[str, Any]
    hardware: dict[str, Any]
    started: dt.datetime = dataclasses.field(default_factory=utc_now)
    exits: Exits | None = None

    @property
    def host(self) -> str:
        return str(self.hardware.get("host") or "")

    @property
    def versions(self) -> dict[str, str | None]:
        """The installed stack's packages and their versions (the known issues are judged on them)."""
        packages: dict[str, str | None] = self.env.get("packages") or {}
        return packages


def announce(ctx: RunContext) -> None:
    """The plan, told: how many cases, on what, how many ranks, how many skipped."""
    run_plan = ctx.plan
    ctx.reporter.planned(
        len(run_plan.planned),
        run_plan.hardware.device_kind if run_plan.hardware else "-",
        run_plan.nproc,
        len(run_plan.skips),
    )


#: what DeepSpeed's JIT-built ops are built against: an overlay holding neither keeps the stack's built ops
OPS_BUILT_AGAINST = ("deepspeed", "torch")


def on_stack(options: RunOptions, overlay: Overlay | None) -> RunOptions:
    """The run's options on a stack: on an overlay (`--with`), its ranks import it first; one holding DeepSpeed or
    torch builds its ops anew (`--with accelerate==X` builds nothing: 5 min on 2 cores, for the same ops)."""
    if overlay is None:
        return options
    own = any(name in overlay.packages for name in OPS_BUILT_AGAINST)
    rank = options.rank.with_overlay(overlay.path, own_ops=own)
    return dataclasses.replace(options, rank=rank, ops_ready=options.ops_ready and not own)


def launch(ctx: RunContext, run_dir: RunDir, overlay: Overlay | None = None) -> list[CaseResult]:
    """Every launch group of the plan, on the installed stack or on `overlay` (its ranks import it first; the known
    issues are judged on its versions, and each result is named by it); each case is merged and reported (scrubbed,
    as the report will hold it) the moment its last rank line is in. A launch whose every line is in is left to
    exit in `ctx.exits`, where the run has one (`run_groups`)."""
    options = with_ops(ctx.plan, run_dir, on_stack(ctx.options, overlay), ctx.reporter)
    versions = {**ctx.versions, **(overlay.packages if overlay else {})}
    stack = overlay.name if overlay else None
    by_id = {p.case: p for p in ctx.plan.planned}
    merged = {s.case: dataclasses.replace(skipped_case(s), stack=stack) for s in ctx.plan.skips}

    def case_done(case: Case, lines: list[RankLine]) -> None:
        merged[case.id] = dataclasses.replace(merge_case(by_id[case.id], lines, versions), stack=stack)
        ctx.reporter.case_done(shown_result(merged[case.id], anonymized=options.anonymized, host=ctx.host))

    run_groups(
        ctx.plan.groups,
        run_dir,
        timeout_override=options.timeout_s,
        events=LaunchEvents(stage=ctx.reporter.stage, case_done=case_done, tick=ctx.reporter.tick),
        cluster=options.cluster,
        options=options.rank,
        together=together(ctx.plan.groups, options.launches, options.cluster is not None),
        exits=ctx.exits,
    )
    return [merged[case_id] for case_id in ctx.plan.selected]


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


def write_manifest(ctx: RunContext, run_dir: RunDir) -> None:
    run_dir.write_manifest(
        Manifest(
            started_at=format_time(ctx.started),
            level=ctx.options.level,
            argv=ctx.options.argv,
            keyword=ctx.options.keyword,
            env=scrub(ctx.env),
            hardware=scrub(ctx.hardware),
            planned=ctx.plan.planned,
            skips=ctx.plan.skips,
            stacks=stacks_section(ctx.versions, ctx.options.overlays),
        )
    )


def on_every_stack(ctx: RunContext) -> tuple[RunDir | None, list[CaseResult]]:
    """The planned cases on the installed stack, then on each overlay (`--with`, launches in `stack-<name>/` of the
    run directory), in a new run directory; none where nothing is planned."""
    if ctx.plan.empty:
        return None, []
    run_dir = RunDir.create(ctx.options.out_dir, ctx.hardware["host"], ctx.started, os.getpid())
    write_manifest(ctx, run_dir)
    results = [] if ctx.options.overlays_only else launch(ctx, run_dir)
    for overlay in ctx.options.overlays:
        stack_dir = run_dir.stack(overlay.name)
        stack_dir.path.mkdir()
        results += launch(ctx, stack_dir, overlay)
    return run_dir, results


def run(options: RunOptions, reporter: RunReporter | None = None) -> tuple[Report, dict[str, Path]]:
    """The whole run on one node: the report and the paths of the files written (`ds_doctor.run.multinode.run` is the
    run across the nodes)."""
    started = utc_now()
    options.out_dir.mkdir(parents=True, exist_ok=True)
    env, hardware = collect_environment()
    run_plan = make_plan(options)
    # launches whose every line is in exit while the run goes on (the next stack's, the node checks, the report);
    # nothing is left running when it ends, however it does
    with Exits() as exits:
        ctx = RunContext(options, run_plan, reporter or SilentReporter(), env, hardware, started, exits)
        announce(ctx)
        run_dir, results = on_every_stack(ctx)
        results = run_node_checks(env, hardware, options.keyword) + results
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
    return report, paths

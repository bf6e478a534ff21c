"""The launch groups of a run: each relaunched until every case of it is settled, and on one node several at once.

A launch spends most of its time starting: torchrun, then each rank importing torch and DeepSpeed (whose first
`initialize` imports torch's compiler as well), and the ranks of one launch wait on each other in every collective.
A level-2 run on one node has a launch per world size; one after another, the second's start-up waits out the
first's cases although a core is idle (issue 38: 2.3x one bare DeepSpeed launch on 2 cores). So on one node every
group's first launch starts at once, and the groups share the node in turns where it matters:

- a case that runs alone (`ProbeSpec.alone`, `Variant.alone`: it times something, or fills memory) waits, in a
  launch that takes turns, until the parent gives its launch the turn: its ranks wait idle until then;
- the turn goes to a launch whose ranks all wait for it while every other running launch waits for its own (one
  whose lines are all in runs until its ranks and torchrun have exited), one launch at a time, and the launch keeps
  it until it has exited;
- while a launch holds the turn no other launch starts (a relaunch waits), so nothing starts beside a measurement.

The plan puts the cases that run alone last in each launch (`ds_doctor.run.plan.plan`), so the rest overlap.
`DS_DOCTOR_LAUNCHES` chooses (`together`): by default at once on a node's CPU only; a run across the nodes never
overlaps its launches, as every node expects them in one order.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import TracebackType

from ds_doctor.cluster.nodes import Cluster
from ds_doctor.probe.rankoptions import DEFAULTS, RankOptions
from ds_doctor.run.attribution import remaining
from ds_doctor.run.launch import POLL_S, Launch, LaunchEvents
from ds_doctor.run.plan import LaunchGroup
from ds_doctor.rundir import RankLine, RunDir

#: a port taken between free_port and torchrun's bind is a race, not a pattern: the fourth time is blamed
PORT_RETRIES = 3

#: How a node's launch groups run (`DS_DOCTOR_LAUNCHES`, read once by the parent into the run's options)
LAUNCH_MODES = {
    "auto": "at once on a node's CPU, one after another on its GPUs",
    "together": "at once, GPUs too (not yet measured on a GPU: docs/gpu/fourth.sh)",
    "one-by-one": "one after another",
}
LAUNCHES_ENV = "DS_DOCTOR_LAUNCHES"


def launches_mode(environ: Mapping[str, str]) -> str:
    """The mode `DS_DOCTOR_LAUNCHES` names in `environ` ("auto" where unset); another value is the caller's
    usage error (ValueError, with the modes)."""
    mode = environ.get(LAUNCHES_ENV) or "auto"
    if mode not in LAUNCH_MODES:
        raise ValueError(f"{LAUNCHES_ENV}={mode[:40]!r} is none of {', '.join(LAUNCH_MODES)}")
    return mode


def together(groups: Sequence[LaunchGroup], mode: str, across_nodes: bool) -> bool:
    """Whether a node's groups run at once, taking turns: never in a run across nodes (every node expects its
    launches in the same order); by `mode` otherwise ("auto": where every launch is on the CPU)."""
    if across_nodes or mode == "one-by-one" or any(group.nodes > 1 for group in groups):
        return False
    return mode == "together" or all(group.device_kind == "cpu" for group in groups)


class Exits:
    """The launches whose every line is in, left to exit while the run goes on (the next stack's launches, the node
    checks, the report): each killed once it has taken `EXIT_WAIT_S` from its last line (`bound`, at every poll),
    and awaited at the end (`finish`: its logs scrubbed). As a `with` block, the run's: on the way out of it every
    one is awaited, and on an exception (Ctrl-C, the doctor's own failure) first killed, so nothing is left running."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []

    def __iter__(self) -> Iterator[Launch]:
        return iter(self.launches)

    def add(self, launch: Launch) -> None:
        self.launches.append(launch)

    def bound(self) -> None:
        for launch in self.launches:
            launch.bound_exit()

    def finish(self) -> None:
        while self.launches:
            self.launches.pop(0).finish()

    def __enter__(self) -> Exits:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is not None:
            for launch in self.launches:
                launch.stop()
        self.finish()


class GroupRun:
    """Every case of a group, relaunching after a timeout or crash inside one node, driven by `poll`."""

    def __init__(
        self,
        group: LaunchGroup,
        run_dir: RunDir,
        *,
        timeout_override: float | None,
        events: LaunchEvents,
        cluster: Cluster | None,
        options: RankOptions,
        takes_turns: bool = False,
        exits: Exits | None = None,
    ) -> None:
        self.group, self.run_dir, self.timeout_override = group, run_dir, timeout_override
        self.events, self.cluster, self.options, self.takes_turns = events, cluster, options, takes_turns
        # where given: a launch whose every line is in goes there to exit, and the group goes on without waiting
        self.exits = exits
        self.pending = list(group.cases)
        self.results: dict[str, list[RankLine]] = {}
        self.attempt = 0
        # each attempt settles at least one case (ds_doctor.run.attribution.remaining)
        self.bound = len(self.pending)
        self.launch: Launch | None = None  # the attempt running now
        self.port_retries = 0  # launches that lost their master port before any rank started

    @property
    def done(self) -> bool:
        return not self.pending and self.launch is None

    def start(self) -> None:
        """The next attempt's launch, with the cases not yet settled."""
        self.launch = Launch(
            self.group,
            self.pending,
            self.run_dir.launch(self.group.name, self.group.device_kind, self.attempt),
            self.timeout_override,
            self.events,
            self.cluster,
            self.attempt,
            self.options,
        )
        self.launch.start(self.takes_turns)

    def poll(self) -> None:
        """One look at the running attempt; when it has ended (or, with `exits`, every line of it is in), its cases
        settled (its lines, or the blame for its ending) and the rest left for the next attempt."""
        if self.launch is None:
            return
        running = self.launch.poll()
        if running and (self.exits is None or self.launch.unfinished()):
            return
        launch, self.launch = self.launch, None
        if running and self.exits is not None:  # its ranks and torchrun exit while the run goes on
            self.exits.add(launch)
        else:
            launch.dir.scrub_logs()
        if self.port_retries < PORT_RETRIES and launch.lost_its_port():
            # nothing ran, nothing to blame: the same cases again on a new port, as one more attempt
            self.port_retries += 1
            self.attempt += 1
            self.bound += 1
            return
        for case in self.pending:
            if launch.complete(case.id):
                self.results[case.id] = launch.lines_of(case)
        blamed = launch.blame()
        # on disk too: a report rebuilt from the run directory (a stopped run's) shows them as they were, not unrun
        launch.dir.write_blamed([line for case in self.pending for line in blamed.get(case.id, ())])
        for case in self.pending:
            if case.id in blamed:
                self.results[case.id] = blamed[case.id]
                self.events.case_done(case, blamed[case.id])
        self.attempt += 1
        self.pending = remaining(self.pending, self.results, self.attempt, self.bound)

    def stop(self) -> None:
        if self.launch is not None:
            self.launch.stop()


class Turns:
    """Who may run alone, and when a launch may start, among launches running at once (the module's rules)."""

    def __init__(self, runs: Sequence[GroupRun], exiting: Iterable[Launch] = ()) -> None:
        self.runs, self.exiting = runs, exiting
        self.holder: Launch | None = None

    def busy(self) -> list[tuple[Launch, bool]]:
        """Every launch still running, and whether all its ranks wait for the turn: one with cases left, or one
        whose lines are all in but whose ranks and torchrun have not exited yet (their teardown is work beside a
        measurement too: ~0.4 s of torchrun's CPU)."""
        launches = [run.launch for run in self.runs if run.launch is not None] + list(self.exiting)
        return [
            (launch, bool(launch.unfinished()) and launch.waiting_turn())
            for launch in launches
            if launch.running()
        ]

    def may_start(self) -> bool:
        return self.holder is None

    def update(self) -> None:
        """The turn taken back from a launch that has exited, and given to the first launch waiting for it where
        every running launch waits."""
        if self.holder is not None and not self.holder.running():
            self.holder = None
        if self.holder is not None:
            return
        busy = self.busy()
        if busy and all(waiting for _, waiting in busy):
            self.holder = busy[0][0]
            self.holder.give_turn()


def run_groups(
    groups: Sequence[LaunchGroup],
    run_dir: RunDir,
    *,
    timeout_override: float | None,
    events: LaunchEvents,
    cluster: Cluster | None = None,
    options: RankOptions = DEFAULTS,
    together: bool = False,
    exits: Exits | None = None,
) -> dict[str, list[RankLine]]:
    """Every case of every group: one group after another, or (`together`, on one node) every group at once taking
    turns. Per-rank lines by case id. `exits`: where given, a launch whose every line is in is not waited for, but
    left there to exit: its owner finishes it (`Exits.finish`) once it has done what it could meanwhile (the
    report)."""
    runs = [
        GroupRun(
            group,
            run_dir,
            timeout_override=timeout_override,
            events=events,
            cluster=cluster,
            options=options,
            takes_turns=together and len(groups) > 1,
            exits=exits,
        )
        for group in groups
    ]
    turns = Turns(runs, exits if exits is not None else ())
    try:
        for batch in [runs] if together else [[run] for run in runs]:
            while not all(run.done for run in batch):
                for run in batch:
                    if run.launch is None and run.pending and turns.may_start():
                        run.start()
                    run.poll()
                if exits is not None:
                    exits.bound()
                turns.update()
                events.tick()
                time.sleep(POLL_S)
    finally:
        for run in runs:
            run.stop()
    return {case_id: lines for run in runs for case_id, lines in run.results.items()}

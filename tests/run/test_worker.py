"""The worker's side of a case: the line it writes for each way a case can end (returned, skipped, raised, sys.exit,
setup failed), with the facts the parent's judge makes an outcome of (`ds_doctor.run.judge`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds_doctor.checks.hang import stragglers
from ds_doctor.plugins import ProbeContext
from ds_doctor.probe import context as context_module
from ds_doctor.probe.registry import find_case
from ds_doctor.reports.hang import StageKind
from ds_doctor.reports.model import ErrorInfo, Finding, Outcome, Severity
from ds_doctor.run import judge
from ds_doctor.run.worker import Worker, run_case, unrun_line
from ds_doctor.rundir import Ended, How, LaunchDir, RankLine

CASE = "frozen_param_names[z2-set-tensor-ws1]"


class Plays:
    """A probe stand-in whose run() plays one path of a reproduce case."""

    def __init__(
        self,
        catch: bool = False,
        show: bool = False,
        raises: BaseException | None = None,
        skip: str | None = None,
        instead: str | None = None,
    ) -> None:
        self.catch, self.show, self.raises, self.skip, self.instead = catch, show, raises, skip, instead

    def run(self, ctx: ProbeContext) -> None:
        ctx.enter("playing")
        ctx.measure("tflops", 1.5)
        if self.skip:
            ctx.skip(self.skip)
        if self.catch:
            ctx.add_findings(
                [Finding("param_name_map", Severity.ERROR, "emb.weight is not a key of engine.param_names")]
            )
        showed = ["save_checkpoint raised ValueError: failed to find frozen ..."] if self.show else []
        if self.raises:
            ctx.reproduce(None, showed=showed)
            raise self.raises
        if self.instead is not None:
            ctx.reproduce(self.instead or None, instead=True)
            return
        ctx.reproduce("ds_frozen_param_not_in_param_names", showed=showed)


def context(rank: int = 0) -> ProbeContext:
    case = find_case(CASE)
    return ProbeContext(
        case_id=case.id,
        params=case.params,
        rank=rank,
        world_size=1,
        local_rank=0,
        device="cpu",
        backend="gloo",
    )


def played(probe: Plays) -> tuple[RankLine, judge.Judgement]:
    """The line the rank writes, and the parent's judgement of it (the case is a reproduce case)."""
    line = run_case(probe, context())
    assert RankLine.from_json(line.to_json()) == line  # what the parent reads back is what the rank wrote
    assert line.outcome is None and line.reason is None  # the rank says what happened, never the outcome
    return line, judge.rank(line, find_case(CASE).reproduce)


def test_a_caught_and_shown_case_is_an_xfail_with_its_findings_and_issue() -> None:
    line, judged = played(Plays(catch=True, show=True))
    assert (judged.outcome, line.ended, line.stage, line.known_issue, line.issue_shown) == (
        Outcome.XFAIL,
        Ended(How.RETURNED),
        "playing",
        "ds_frozen_param_not_in_param_names",
        True,
    )
    assert judged.reason == "emb.weight is not a key of engine.param_names" and line.measures == {
        "tflops": 1.5
    }
    assert [f.rank for f in line.findings] == [0]  # stamped with the rank that found it
    assert line.shown == ("save_checkpoint raised ValueError: failed to find frozen ...",)
    assert line.notes["showed"] == list(line.shown)


def test_another_known_issue_caught_by_a_reproduce_case_is_a_fail_naming_it() -> None:
    """Never an xfail of the case's own issue: make verify-catalog would record that issue as reproduced."""
    line, judged = played(Plays(catch=True, instead="ds_z3_param_not_available_on_fetch"))
    assert (judged.outcome, line.known_issue, line.issue_shown, line.instead) == (
        Outcome.FAIL,
        "ds_z3_param_not_available_on_fetch",
        True,
        True,
    )
    assert judged.reason == "emb.weight is not a key of engine.param_names"
    # nothing in the catalog fits: a fail naming no issue
    unexplained, unexplained_judged = played(Plays(catch=True, instead=""))
    assert (unexplained_judged.outcome, unexplained.known_issue) == (Outcome.FAIL, None)


def test_shown_but_not_caught_is_a_fail_that_says_so() -> None:
    line, judged = played(Plays(show=True))
    assert judged.outcome == Outcome.FAIL and line.issue_shown
    assert (judged.reason or "").startswith(
        "showed, but no invariant caught it first: save_checkpoint raised"
    )
    absent, absent_judged = played(Plays())
    assert (absent_judged.outcome, absent.issue_shown, absent.shown) == (Outcome.XPASS, False, ())
    assert "showed" not in absent.notes


def test_a_raise_is_an_error_with_its_traceback_and_a_skip_keeps_its_reason() -> None:
    raised, judged = played(Plays(raises=ValueError("planted")))
    assert (raised.ended, judged.outcome, judged.reason, raised.error and raised.error.type) == (
        Ended(How.RAISED),
        Outcome.ERROR,
        "ValueError: planted",
        "ValueError",
    )
    assert raised.error is not None and "Traceback" in raised.error.traceback and raised.stage == "playing"
    skipped, skip_judged = played(Plays(skip="pip install something"))
    assert (skipped.ended, skip_judged.outcome, skip_judged.reason) == (
        Ended(How.SKIPPED, said="pip install something"),
        Outcome.SKIP,
        "pip install something",
    )


def test_a_sys_exit_of_the_cases_code_is_an_error_with_its_exit_code() -> None:
    exited, judged = played(Plays(raises=SystemExit("bye")))
    assert (exited.ended, exited.exit_code, judged.outcome) == (
        Ended(How.EXITED, said="'bye'"),
        1,
        Outcome.ERROR,
    )
    assert judged.reason == "the case's code called sys.exit('bye') (a --model factory, or code it imports)"
    assert played(Plays(raises=SystemExit(None)))[0].exit_code == 0


def test_a_failed_setup_fails_the_case_with_the_setup_error() -> None:
    try:
        raise RuntimeError("ninja is missing")
    except RuntimeError as exc:
        failure = ErrorInfo.of(exc)
    line = unrun_line(context(), Ended(How.SETUP_FAILED), "setup", failure)
    judged = judge.rank(line, reproduce=False)
    assert (judged.outcome, line.stage, judged.reason) == (
        Outcome.ERROR,
        "setup",
        "probe setup failed: RuntimeError: ninja is missing",
    )


def test_an_unknown_measure_is_refused() -> None:
    with pytest.raises(KeyError, match="unknown measure 'speed'"):
        context().measure("speed", 1.0)


class Clock:
    """`time` as the context reads it, moved on by hand: stage times without sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now


class BuildsOps:
    """A probe stand-in whose setup loads DeepSpeed's ops as `ds_doctor.plugins.process.load_deepspeed_ops` enters
    them, then whose case takes `start_s` before its first stage of its own."""

    def __init__(self, clock: Clock, build_s: float, start_s: float) -> None:
        self.clock, self.build_s, self.start_s = clock, build_s, start_s

    def setup(self, ctx: ProbeContext) -> None:
        ctx.enter("load ShareMemCommBuilder")
        self.clock.now += self.build_s

    def run(self, ctx: ProbeContext) -> None:
        self.clock.now += self.start_s
        ctx.enter("all_reduce 4096 B: check")
        self.clock.now += 0.01


def first_case_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rank: int, build_s: float, start_s: float
) -> RankLine:
    """A rank's line for its probe's first case, its setup run by the worker as in a launch."""
    clock = Clock()
    monkeypatch.setattr(context_module, "time", clock)
    tmp_path.mkdir(exist_ok=True)
    worker = Worker(LaunchDir(tmp_path), "gloo", rank, 2, rank)
    probe, ctx = BuildsOps(clock, build_s, start_s), context(rank)
    assert worker.setup(find_case(CASE), probe, ctx) is None
    line = run_case(probe, ctx)
    assert RankLine.from_json(line.to_json()) == line  # the kinds go through the rank line's JSON
    return line


def test_a_setup_keeps_its_stages_as_its_own_and_the_case_starts_at_its_own_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45: the case's first stretch was named after the setup's last stage ("build ShareMemCommBuilder")."""
    line = first_case_line(tmp_path, monkeypatch, 0, build_s=2.0, start_s=0.5)
    assert [(t.stage, t.kind, t.start_s, t.duration_s) for t in line.stages] == [
        ("setup", StageKind.SETUP, -2.0, 0.0),
        ("load ShareMemCommBuilder", StageKind.SETUP, -2.0, 2.0),
        ("start", StageKind.CASE, 0.0, 0.5),
        ("all_reduce 4096 B: check", StageKind.CASE, 0.5, 0.01),
    ]


def test_a_rank_slow_in_its_setup_is_no_straggler_and_one_slow_in_its_case_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 takes 30 s loading DeepSpeed's ops (waiting on their file lock while something else builds them):
    ds-doctor's scaffolding, never a straggler; a case's own first stretch still is judged, under its own name."""
    fast = first_case_line(tmp_path / "r0", monkeypatch, 0, build_s=0.1, start_s=0.01)
    slow_setup = first_case_line(tmp_path / "r1", monkeypatch, 1, build_s=30.0, start_s=0.01)
    assert stragglers({0: fast.stages, 1: slow_setup.stages}) == []
    slow_start = first_case_line(tmp_path / "r1b", monkeypatch, 1, build_s=0.1, start_s=3.0)
    [found] = stragglers({0: fast.stages, 1: slow_start.stages})
    assert (found.invariant, found.rank, found.stage) == ("straggler", 1, "start")


def test_settle_heap_freezes_what_lives_and_never_what_is_garbage() -> None:
    import gc
    import weakref

    from ds_doctor.run.worker import settle_heap

    class Node:
        pass

    kept, lost = Node(), Node()
    lost.me = lost  # type: ignore[attr-defined]  # a cycle: only a collection frees it
    gone = weakref.ref(lost)
    del lost
    gc.unfreeze()
    try:
        seen = settle_heap(0)  # modules were imported since 0: collect, then freeze
        assert gone() is None, "a cycle left unreachable before the case was frozen, not collected"
        assert gc.get_freeze_count() > 0 and seen == len(__import__("sys").modules)
        frozen = gc.get_freeze_count()
        assert settle_heap(seen) == seen and gc.get_freeze_count() == frozen  # no new module: nothing to do
        later = Node()
        later.me = later  # type: ignore[attr-defined]  # what a case leaves after the freeze
        after = weakref.ref(later)
        del later
        gc.collect()  # the library's own collection (DeepSpeed's) still frees it
        assert after() is None and kept is not None
    finally:
        gc.unfreeze()

"""The supervisor's side of a rank that wrote no line: `Launch` hands the judge what it saw (the stage reached, the
exit code and signal, the limit that ran out, the evidence), one `RankLine.lost` per rank, and the judge says what it
means. No torchrun: a launch directory as a dead or hung launch leaves it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from ds_doctor.forensics.evidence import Evidence
from ds_doctor.probe.spec import Case
from ds_doctor.reports.model import Finding, Outcome, Severity
from ds_doctor.run import judge
from ds_doctor.run.attribution import Ending
from ds_doctor.run.launch import Launch, LaunchEvents
from ds_doctor.run.plan import LaunchGroup
from ds_doctor.rundir import Beat, Ended, How, LaunchDir, RankLine

RESOURCES = Path(__file__).resolve().parents[1] / "resources"
FIRST, SECOND = (Case("comm", "smoke", variant, 2, 2) for variant in ("a", "b"))


def launch(tmp_path: Path, stages: dict[int, str]) -> Launch:
    """A launch of two cases whose first finished on both ranks and whose second was in `stages` when it ended
    (rank 0 wrote its line of it where it is not in `stages`)."""
    group = LaunchGroup(2, "cpu", "gloo", (FIRST, SECOND))
    directory = LaunchDir(tmp_path)
    tmp_path.mkdir(exist_ok=True)
    started = time.time()
    for rank in (0, 1):
        where = (SECOND.id, stages[rank]) if rank in stages else (SECOND.id, "finished")
        directory.heartbeat(rank).write_text(Beat(rank, *where, started, started).to_json())
    ran = Launch(group, [FIRST, SECOND], directory, 6.0, LaunchEvents())
    done = [RankLine(FIRST.id, rank, 2, ended=Ended(How.RETURNED), stage="step") for rank in (0, 1)]
    ran.lines = {FIRST.id: dict(enumerate(done))}
    if 0 not in stages:
        ran.lines[SECOND.id] = {0: RankLine(SECOND.id, 0, 2, ended=Ended(How.RETURNED), stage="step")}
    return ran


def test_a_rank_killed_in_its_case_is_an_error_with_its_signal_and_stage(tmp_path: Path) -> None:
    died = launch(tmp_path, {1: "train"})
    shutil.copy(RESOURCES / "torchrun_sigkill.log", died.dir.torchrun_log)  # rank 1 SIGKILLed, rank 0 exit 1
    died.returncode = 1
    blamed = died.blame()
    assert list(blamed) == [SECOND.id]
    own, lost = blamed[SECOND.id]
    assert own is died.lines[SECOND.id][0]  # a rank that finished keeps its own line
    assert (lost.ended, lost.stage, lost.exit_code, lost.signal, lost.outcome) == (
        Ended(How.DIED),
        "train",
        -9,
        "SIGKILL",
        None,
    )
    assert lost.stderr_tail  # no rank log: torchrun's
    assert judge.rank(lost, reproduce=False) == judge.Judgement(
        Outcome.ERROR, "rank 1 killed by SIGKILL in stage 'train'"
    )


def test_a_hung_case_is_a_timeout_on_every_rank_that_never_reported_with_its_stage(tmp_path: Path) -> None:
    hung = launch(tmp_path, {0: "all_reduce #7", 1: "setup"})
    hung.timed_out = Ending(SECOND.id, hung.dir.read_beats())
    said = Finding("hang", Severity.ERROR, "rank 1 never joined all_reduce #7")
    hung.evidence = Evidence(findings=[said])
    lines = hung.blame()[SECOND.id]
    assert [(line.ended, line.stage, line.duration_s) for line in lines] == [
        (Ended(How.TIMED_OUT, said=said.message, limit_s=6.0), "all_reduce #7", 6.0),
        (Ended(How.TIMED_OUT, said=said.message, limit_s=6.0), "setup", 6.0),
    ]
    assert lines[0].findings == (said,) and lines[1].findings == ()  # about no rank: on the first line
    assert "forensics" in lines[0].notes and not lines[1].notes
    assert [judge.rank(line, reproduce=False) for line in lines] == [
        judge.Judgement(
            Outcome.TIMEOUT, "timed out after 6 s on rank 0 in stage 'all_reduce #7': " + said.message
        ),
        judge.Judgement(Outcome.TIMEOUT, "timed out after 6 s on rank 1 in stage 'setup': " + said.message),
    ]
    assert all(RankLine.from_json(line.to_json()) == line for line in lines)

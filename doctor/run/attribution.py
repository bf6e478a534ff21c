"""Who is blamed when a launch ends early, and what runs again: pure functions over heartbeats and lines.

`ds_doctor.run.launch.Launch` supervises (starts torchrun, polls, kills, reads logs); what its ending means is
decided here, apart from any process, so each branch of the product's promise "one bad case never costs the
others" is a unit test of milliseconds (pytest keeps `CallInfo.from_call` apart from `TestReport` the same way):

- the culprit: the heartbeat name whose limit ran out, else the unfinished case a rank was in when the process
  died (a probe's setup, or the launch itself, before any case);
- the victims: the culprit alone, every case of a probe whose setup failed, or everything unfinished when nothing
  had started (relaunching would gain nothing) or when the launch spans nodes (every node would have to agree
  on what is left, so nothing is rerun across nodes);
- each victim rank's cause, from which `Launch` writes its line;
- the next attempt, with the rest, bounded: every attempt settles at least one case, so a group of n cases needs
  at most n launches.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Container, Mapping, Sequence

from ds_doctor.probe.spec import Case
from ds_doctor.rundir import LAUNCH, Beat, setup_name, setup_probe


@dataclasses.dataclass(frozen=True)
class Ending:
    """How a launch ended, as its supervisor saw it: the heartbeat name whose limit ran out (a case id, a probe's
    setup or `LAUNCH`), or None where the process exited by itself; and the ranks' last heartbeats."""

    timed_out: str | None
    beats: Mapping[int, Beat]


class Cause(enum.Enum):
    """Why a rank of a victim case has the line it gets."""

    FINISHED = "its own line is in"
    TIMED_OUT = "a rank of the case that overran its limit"
    CRASHED = "a rank of the case in progress when the launch died"
    NEVER_GATHERED = "across nodes: no rank of this node ever started (the rendezvous did not gather)"
    REMOTE = "across nodes: a rank on another node that stopped answering"
    NOT_RUN = "across nodes: a case after the culprit, never run and never rerun"


def culprit(ending: Ending, unfinished: Sequence[Case]) -> str | None:
    """The name the launch ended in: the timed-out one, else the first unfinished case (in launch order) a rank was
    in, else a setup or the launch a rank was in; None when no rank ever beat."""
    if ending.timed_out is not None:
        return ending.timed_out
    ids = {case.id for case in unfinished}
    names = [beat.case for beat in ending.beats.values() if beat.case in ids or beat.case.startswith("<")]
    for case in unfinished:
        if case.id in names:
            return case.id
    return names[0] if names else None


def victims(blamed: str | None, unfinished: Sequence[Case], across_nodes: bool) -> list[Case]:
    """The cases the ending takes down; the rest of the unfinished ones run again."""
    if blamed is None or blamed == LAUNCH or across_nodes:
        return list(unfinished)
    probe = setup_probe(blamed)
    if probe:
        return [case for case in unfinished if case.probe == probe]
    return [case for case in unfinished if case.id == blamed] or list(unfinished)


def cause(
    case: Case, rank: int, blamed: str | None, has_line: bool, ending: Ending, across_nodes: bool
) -> Cause:
    """Why rank `rank` of victim `case` gets the line it does (`has_line`: its own line is already in)."""
    if across_nodes and case.id != blamed:
        return Cause.NOT_RUN
    if has_line:
        return Cause.FINISHED
    if across_nodes and not ending.beats:
        return Cause.NEVER_GATHERED
    if across_nodes and rank not in ending.beats:
        return Cause.REMOTE
    return Cause.TIMED_OUT if ending.timed_out is not None else Cause.CRASHED


def attribute(
    unfinished: Sequence[Case], lines: Mapping[str, Container[int]], ending: Ending, across_nodes: bool
) -> tuple[str | None, dict[str, dict[int, Cause]]]:
    """The culprit, and for each victim case the cause of each of its ranks (`lines`: the ranks whose line is in,
    by case id)."""
    blamed = culprit(ending, unfinished)
    return blamed, {
        case.id: {
            rank: cause(case, rank, blamed, rank in lines.get(case.id, ()), ending, across_nodes)
            for rank in range(case.world_size)
        }
        for case in victims(blamed, unfinished, across_nodes)
    }


def stage_of(case: Case, beat: Beat | None) -> str:
    """The stage a rank reached in `case`: its beat's stage when it was in the case, its probe's setup or the launch;
    `setup: <stage>` in the setup; `not started` when it was elsewhere."""
    where = beat.case if beat else None
    if beat is None or where not in (case.id, setup_name(case.probe), LAUNCH):
        return "not started"
    return f"setup: {beat.stage}" if where == setup_name(case.probe) else beat.stage


class RelaunchError(RuntimeError):
    """A launch that settled no case: relaunching would repeat it forever."""


def remaining(pending: Sequence[Case], settled: Container[str], attempt: int, bound: int) -> list[Case]:
    """The cases the next attempt runs. Each attempt settles at least one case (finished, or blamed); one that
    settled none, or an attempt past `bound`, is the doctor's own bug, said so instead of looping."""
    rest = [case for case in pending if case.id not in settled]
    if rest and (len(rest) == len(pending) or attempt >= bound):
        raise RelaunchError(
            f"launch attempt {attempt} of at most {bound} settled none of {len(pending)} cases "
            f"({', '.join(case.id for case in rest[:3])}...)"
        )
    return rest

"""Reports rebuilt from disk: a run directory (a finished case, one some rank never finished, a skip, a truncated
line, a case a timeout took down, the signal that stopped the run) and report files of this schema and the one
before; everything unreadable is an input error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ds_doctor.probe.rankoptions import DEFAULTS
from ds_doctor.probe.registry import find_case
from ds_doctor.reports.model import ExitCode, Outcome, Report, RunStop, validate
from ds_doctor.run.groups import GroupRun
from ds_doctor.run.launch import LaunchEvents
from ds_doctor.run.pipeline import planned_case
from ds_doctor.run.plan import LaunchGroup
from ds_doctor.run.recover import UNFINISHED, InputError, load_report_file, report_from_run_dir
from ds_doctor.rundir import Manifest, RankLine, RunDir
from tests.reports.samples import a_report, case

ENV = {
    "python": "3.11.7",
    "packages": {"deepspeed": "0.19.8", "torch": "2.13.0", "numpy": "2.3.5"},
    "variables": {},
}
HARDWARE = {"host": "node1", "cpus": 2, "memory_bytes": 1 << 30, "gpus": [], "gpus_reason": "no driver"}
DONE, HUNG = "comm[all_reduce-ws2]", "comm[broadcast-ws2]"


def a_run_dir(tmp_path: Path) -> RunDir:
    run = RunDir(tmp_path / "run-node1")
    run.path.mkdir()
    planned = tuple(planned_case(find_case(c), "cpu") for c in (DONE, HUNG))
    skipped = (planned_case(find_case("zero_offload[z1-none-fp32-ws2]"), "cpu", "needs 2 ranks"),)
    run.write_manifest(Manifest("2026-11-22T20:00:00Z", 2, ("run",), None, ENV, HARDWARE, planned, skipped))
    launch = run.launch("ws2", "cpu", 0)
    launch.write_cases([DONE, HUNG])
    for rank in (0, 1):
        lines = [
            RankLine(DONE, rank, 2, Outcome.PASS, measures={"busbw_gbps": 1.5}, duration_s=0.5).to_json()
        ]
        if rank == 0:
            lines.append(RankLine(HUNG, 0, 2, Outcome.PASS).to_json())
        launch.rank_lines(rank).write_text(
            "\n".join(lines) + "\n" + ('{"case": "x", "ra' if rank == 1 else "")
        )
    return run


def test_a_killed_run_is_rebuilt_with_its_unfinished_case_not_run(tmp_path: Path) -> None:
    """A doctor killed unawares (SIGKILL): the case some rank never finished is `not_run`, never an error, and the
    report says the run did not finish, after how many of its cases; nothing failed, so nothing fails the exit code."""
    report, warnings = report_from_run_dir(a_run_dir(tmp_path).path)
    validate(report.to_dict())
    assert warnings == [
        f"{tmp_path / 'run-node1' / 'ws2-cpu-0' / 'rank1.jsonl'}: line 2 is truncated or not a result "
        "line; skipped"
    ]
    results = {r.case: r for r in report.results}
    assert list(results) == [DONE, HUNG, "zero_offload[z1-none-fp32-ws2]"]
    assert results[DONE].outcome == Outcome.PASS and results[DONE].measures == {"busbw_gbps": 1.5}
    hung = results[HUNG]
    assert (hung.outcome, hung.reason, hung.notes) == (Outcome.NOT_RUN, UNFINISHED, {"unfinished": True})
    assert [(r.rank, r.outcome) for r in hung.ranks] == [(0, "pass"), (1, "not_run")]
    assert results["zero_offload[z1-none-fp32-ws2]"].reason == "needs 2 ranks"
    assert report.started_at == "2026-11-22T20:00:00Z" and report.run_dir == str(tmp_path / "run-node1")
    assert report.stopped == RunStop(None, finished=1, planned=2)
    assert report.stopped.headline == (
        "Did not finish (the run ended without writing its report) after 1 of 2 cases: 1 not run"
    )
    assert report.to_dict()["stopped"] == {"signal": None, "finished": 1, "planned": 2}
    assert report.summary["not_run"] == 1 and report.summary["error"] == 0
    assert report.exit_code == ExitCode.OK
    assert load_report_json(report.to_json(), tmp_path).stopped == report.stopped  # round trip


def load_report_json(text: str, tmp_path: Path) -> Report:
    path = tmp_path / "again.json"
    path.write_text(text)
    return load_report_file(path)


def test_a_run_stopped_by_a_signal_names_it_and_a_later_rebuild_reads_it_back(tmp_path: Path) -> None:
    run = a_run_dir(tmp_path)
    report, _ = report_from_run_dir(run.path, stopped_by="SIGTERM")
    assert report.stopped == RunStop("SIGTERM", 1, 2)
    assert report.stopped.headline == "Stopped by SIGTERM after 1 of 2 cases: 1 not run"
    run.write_stop("SIGHUP")  # what the stopped run records in its directory
    assert report_from_run_dir(run.path)[0].stopped == RunStop("SIGHUP", 1, 2)
    (run.path / RunDir.STOPPED).write_text('{"signal": "rm -rf /"}')  # a run directory is data
    assert report_from_run_dir(run.path)[0].stopped == RunStop(None, 1, 2)


def test_a_run_that_finished_every_case_is_rebuilt_without_a_stop(tmp_path: Path) -> None:
    run = a_run_dir(tmp_path)
    launch = run.launch("ws2", "cpu", 0)
    with launch.rank_lines(1).open("a") as handle:
        handle.write("\n" + RankLine(HUNG, 1, 2, Outcome.PASS).to_json() + "\n")
    report, _ = report_from_run_dir(run.path)
    assert report.stopped is None and "stopped" not in report.to_dict()
    assert {r.outcome for r in report.results if r.case in (DONE, HUNG)} == {Outcome.PASS}
    # stopped by a signal after its last case finished (writing its report): said, with nothing not run
    assert report_from_run_dir(run.path, stopped_by="SIGINT")[0].stopped == RunStop("SIGINT", 2, 2)


def test_a_case_a_timeout_took_down_is_rebuilt_as_it_was_never_as_not_run(tmp_path: Path) -> None:
    """The parent's lines for the cases a launch's ending took down go into the run directory with the ranks' own: a
    run stopped later (or killed) still reports its timeout as a timeout."""
    run = a_run_dir(tmp_path)
    hung = find_case(HUNG)
    group = LaunchGroup(2, "cpu", "gloo", (find_case(DONE), hung))
    blamed = [
        RankLine(HUNG, 0, 2, Outcome.PASS),
        RankLine(HUNG, 1, 2, Outcome.TIMEOUT, "timed out after 6 s"),
    ]

    class Ended:
        """A launch that has ended, its second case taken down by a timeout."""

        dir = run.launch("ws2", "cpu", 0)

        def poll(self) -> bool:
            return False

        def complete(self, case_id: str) -> bool:
            return case_id == DONE

        def lines_of(self, case: object) -> list[RankLine]:
            return [RankLine(DONE, r, 2, Outcome.PASS) for r in (0, 1)]

        def blame(self) -> dict[str, list[RankLine]]:
            return {HUNG: blamed}

        def lost_its_port(self) -> bool:
            return False

    heard: list[str] = []
    group_run = GroupRun(
        group,
        run,
        timeout_override=None,
        events=LaunchEvents(stage=lambda *_: None, case_done=lambda case, _: heard.append(case.id)),
        cluster=None,
        options=DEFAULTS,
    )
    group_run.launch = Ended()  # type: ignore[assignment]
    group_run.poll()
    assert group_run.done and heard == [HUNG]
    assert (run.launch("ws2", "cpu", 0).path / "blamed.jsonl").is_file()
    report, _ = report_from_run_dir(run.path, stopped_by="SIGTERM")
    results = {r.case: r for r in report.results}
    assert results[HUNG].outcome == Outcome.TIMEOUT and results[HUNG].reason == "timed out after 6 s"
    assert report.stopped == RunStop("SIGTERM", 2, 2)


def test_the_cases_on_an_overlay_are_rebuilt_on_its_versions_and_named_by_it(tmp_path: Path) -> None:
    run = a_run_dir(tmp_path)
    manifest = json.loads(run.manifest.read_text())
    hostile = "../../outside"  # a manifest is data: the stack's folder stays inside the run directory
    manifest["stacks"] = [
        {"name": "installed", "with": [], "packages": {"deepspeed": "0.19.8"}, "path": None},
        {"name": hostile, "with": [hostile], "packages": {"deepspeed": "0.14.2"}, "path": "/x"},
    ] * 2
    run.manifest.write_text(json.dumps(manifest))
    stack = run.stack(hostile)
    assert stack.path.parent == run.path and stack.path.name == "stack-outside"
    launch = stack.launch("ws2", "cpu", 0)
    launch.path.mkdir(parents=True)
    for rank in (0, 1):  # on the overlay the first case finished, the second never started
        launch.rank_lines(rank).write_text(
            RankLine(DONE, rank, 2, Outcome.FAIL, reason="moved").to_json() + "\n"
        )
    report, _ = report_from_run_dir(run.path)
    validate(report.to_dict())
    assert [s.name for s in report.stacks] == ["installed", hostile]  # each once
    results = {(r.case, r.stack): r for r in report.results if r.probe != "health"}
    assert [k for k in results if k[1] == hostile] == [
        (DONE, hostile),
        (HUNG, hostile),
        ("zero_offload[z1-none-fp32-ws2]", hostile),
    ]
    assert (results[(DONE, None)].outcome, results[(DONE, hostile)].outcome) == (Outcome.PASS, Outcome.FAIL)
    assert (
        results[(HUNG, hostile)].reason == UNFINISHED
        and results[(HUNG, hostile)].ranks[0].outcome == "not_run"
    )
    assert results[("zero_offload[z1-none-fp32-ws2]", hostile)].outcome == Outcome.SKIP
    assert report.stopped == RunStop(None, finished=2, planned=4)  # each stack's cases


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (None, "is not a ds-doctor run directory (no run.json)"),
        ("", "empty file"),
        ("{not json", "not valid JSON"),
        ('{"a": 1}', "not a ds-doctor run manifest"),
        ('{"manifest_version": 9, "planned": []}', "written by a newer ds-doctor (manifest version 9)"),
        ('{"manifest_version": 1, "planned": [{"case": "x"}], "skips": []}', "a planned case is incomplete"),
        ('{"manifest_version": 1, "planned": [], "skips": [], "stacks": {}}', "stacks is {}, not a list"),
        ('{"manifest_version": 1, "planned": [], "skips": [], "stacks": [{"name": 3}]}', "a stack is"),
        (
            '{"manifest_version": 1, "planned": [], "skips": [], "stacks": [{"name": "a", "packages": {"x": 1}}]}',
            "a stack is",
        ),
    ],
)
def test_an_unreadable_run_directory_is_an_input_error(
    tmp_path: Path, manifest: str | None, message: str
) -> None:
    if manifest is not None:
        (tmp_path / "run.json").write_text(manifest)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        report_from_run_dir(tmp_path)


def test_report_files_of_this_schema_and_of_version_1_are_read(tmp_path: Path) -> None:
    report = a_report(
        [case(Outcome.PASS, "all_reduce", probe="comm", world_size=2, measures={"busbw_gbps": 2.0})]
    )
    current = tmp_path / "v2.json"
    current.write_text(report.to_json())
    assert load_report_file(current) == report
    old = report.to_dict()
    old["schema_version"] = 1
    for result in old["results"]:
        result["notes"] = {**result.pop("measures"), "sizes": result.pop("series")}
    (tmp_path / "v1.json").write_text(json.dumps(old))
    assert load_report_file(tmp_path / "v1.json").results[0].measures == {"busbw_gbps": 2.0}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("{", "not valid JSON"),
        ('{"tool": {"name": "other"}}', "not a ds-doctor report"),
        ('{"tool": {"name": "ds-doctor"}, "schema_version": 3}', "schema version 3 is newer"),
        ('{"tool": {"name": "ds-doctor"}, "schema_version": 2}', "not a valid ds-doctor report at top level"),
    ],
)
def test_an_unreadable_report_file_is_an_input_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_report_file(path)

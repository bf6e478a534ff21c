"""The run directory's seams: the rank line a worker writes and the parent reads back, heartbeats, the manifest,
and the file names (owned by one class)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ds_doctor.reports.model import ErrorInfo, Finding, Outcome, Severity, TensorRecord
from ds_doctor.rundir import (
    Beat,
    LaunchDir,
    Manifest,
    PlannedCase,
    RankLine,
    RunDir,
    read_rank_lines,
    setup_name,
    setup_probe,
)

RECORD = TensorRecord(
    1, "after_step", "fp32_partition", "optimizer.x[0]", None, "meta", "float32", (8,), 8, 32
)


def a_line(**fields: object) -> RankLine:
    base = dict(
        case="zero_offload[z3-opt-bf16-ws2]",
        rank=1,
        world_size=2,
        outcome=Outcome.FAIL,
        reason="moved",
        stage="after_step",
        duration_s=1.25,
        device="cpu",
        findings=(
            Finding("fp32_partition_placement", Severity.ERROR, "moved", 1, "after_step", "cpu", (RECORD,)),
        ),
        device_map=(RECORD,),
        notes={"optimizer": "DeepSpeedZeroOptimizer_Stage3"},
        measures={"tflops": 1.5},
        series=({"bytes": 4096.0, "time_us": 3.0},),
        shown=("saved nothing",),
        known_issue="ds_z3_offload_gradnorm_device_mismatch",
        issue_shown=True,
        error=ErrorInfo("ValueError", "x", "Traceback ..."),
        exit_code=None,
        signal=None,
        stderr_tail="tail",
    )
    return RankLine(**{**base, **fields})  # type: ignore[arg-type]


def test_a_rank_line_round_trips_through_json() -> None:
    line = a_line()
    text = line.to_json()
    assert "\n" not in text and RankLine.from_json(text) == line
    assert RankLine.from_json(text.encode()) == line  # as the parent reads it, bytes


@pytest.mark.parametrize(
    "text",
    [
        '{"case": "a[x-ws1]", "rank": 0, "outc',
        "[1, 2]",
        '{"rank": 0}',
        '{"case": "a", "rank": 0, "outcome": "exploded"}',
    ],
)
def test_what_is_not_a_rank_line_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        RankLine.from_json(text)


def test_a_line_written_before_the_line_was_typed_still_reads() -> None:
    old = {
        "case": "a[x-ws1]",
        "rank": 0,
        "world_size": 1,
        "outcome": "xfail",
        "reason": None,
        "stage": "save",
        "known_issue": {"id": "ds_frozen_param_not_in_param_names", "shown": True},
        "findings": [],
        "device_map": [],
    }
    line = RankLine.from_json(json.dumps(old))
    assert (line.known_issue, line.issue_shown, line.outcome) == (
        "ds_frozen_param_not_in_param_names",
        True,
        Outcome.XFAIL,
    )


def test_rank_lines_from_a_file_skip_a_truncated_one_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "rank1.jsonl"
    path.write_text(a_line().to_json() + "\n\n" + a_line(case="b[x-ws2]").to_json()[:50])
    warnings: list[str] = []
    assert [line.case for line in read_rank_lines(path, warnings)] == ["zero_offload[z3-opt-bf16-ws2]"]
    assert warnings == [f"{path}: line 3 is truncated or not a result line; skipped"]


def test_heartbeat_names_and_beats(tmp_path: Path) -> None:
    assert (
        setup_probe(setup_name("zero_offload")) == "zero_offload"
        and setup_probe("zero_offload[x-ws1]") is None
    )
    launch = LaunchDir(tmp_path)
    launch.heartbeat(0).write_text(Beat(0, "a[x-ws2]", "train", 1.0, 2.0).to_json())
    launch.heartbeat(1).write_text('{"rank": 1, "ca')  # caught half-written: skipped, read again next poll
    assert launch.read_beats() == {0: Beat(0, "a[x-ws2]", "train", 1.0, 2.0)}


def test_one_class_owns_the_file_names(tmp_path: Path) -> None:
    import datetime as dt

    run = RunDir.create(tmp_path, "node1", dt.datetime(2026, 11, 22, 20, 0, tzinfo=dt.timezone.utc), 42)
    assert run.path.name == "run-node1-20261122T200000Z-42" and run.manifest.name == "run.json"
    launch = run.launch("ws2", "cpu", 1)
    launch.write_cases(["a[x-ws2]", "b[x-ws2]"])
    assert launch.path.name == "ws2-cpu-1" and launch.read_cases() == ["a[x-ws2]", "b[x-ws2]"]
    assert [p.name for p in (launch.rank_log(1), launch.rank_lines(1), launch.heartbeat(1))] == [
        "rank1.log",
        "rank1.jsonl",
        "heartbeat-rank1.json",
    ]
    launch.rank_lines(1).write_text(a_line().to_json() + "\n")
    assert run.rank_line_files() == [launch.rank_lines(1)]


def test_the_manifest_round_trips(tmp_path: Path) -> None:
    planned = PlannedCase("a[x-ws2]", "a", "smoke", "x", 2, 2, False, "cpu", ("ds_jit_ninja_missing",))
    skipped = PlannedCase("a[x-ws4]", "a", "smoke", "x", 4, 3, True, "cpu", (), "needs 4 ranks")
    manifest = Manifest(
        "2026-11-22T20:00:00Z",
        3,
        ("run", "--level", "3"),
        "a",
        {"packages": {}},
        {"host": "n"},
        (planned,),
        (skipped,),
    )
    run = RunDir(tmp_path)
    run.write_manifest(manifest)
    assert Manifest.from_dict(json.loads(run.manifest.read_text())) == manifest
    older = {**planned.to_dict(), "reason": "needs 4 ranks"}
    del older["skip_reason"]
    # the manifest's first writers said "reason"
    assert PlannedCase.from_dict(older).skip_reason == "needs 4 ranks"


def test_a_run_directory_scrubs_every_launch_log_of_a_stopped_run(tmp_path: Path) -> None:
    """A run stopped mid-launch (a signal) never reached the launch's own scrub: the run directory scrubs every
    launch's logs, each `--with` overlay's too, and leaves a FIFO (it would block) and a link (not ours) alone."""
    import os

    from tests.resources.secret_probes import SECRETS

    token, secret = SECRETS["hf_1"]
    run = RunDir(tmp_path / "run-h-1")
    logs = [
        run.launch("ws1", "cpu", 0).rank_log(0),
        run.launch("ws2", "cpu", 1).torchrun_log,
        run.stack("deepspeed==0.14.2").launch("ws2", "cpu", 0).rank_log(1),
    ]
    for log in logs:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"loading with HF_TOKEN={token}\nordinary line\n")
    outside = tmp_path / "outside.log"
    outside.write_text(f"not ours {token}\n")
    (logs[0].parent / "link.log").symlink_to(outside)
    os.mkfifo(logs[0].parent / "fifo.log")
    run.scrub_logs()
    for log in logs:
        assert secret not in log.read_text() and "ordinary line" in log.read_text(), log
    assert token in outside.read_text() and (logs[0].parent / "link.log").is_symlink()


def test_the_signal_that_stopped_a_run_is_kept_in_its_directory(tmp_path: Path) -> None:
    import os

    run = RunDir(tmp_path)
    assert run.read_stop() is None
    run.write_stop("SIGTERM")
    assert run.read_stop() == "SIGTERM"
    for text in ("{", "[]", '{"signal": 15}', '{"signal": "SIGTERM; rm"}'):
        (tmp_path / RunDir.STOPPED).write_text(text)
        assert run.read_stop() is None, text
    (tmp_path / RunDir.STOPPED).unlink()
    os.mkfifo(tmp_path / RunDir.STOPPED)  # a run directory is data: a FIFO there never blocks a rebuild
    assert run.read_stop() is None

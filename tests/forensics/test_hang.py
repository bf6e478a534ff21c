"""Hang forensics under real torchrun and gloo (tests/resources/hang_probes.py plants each fault): a hung case names
the rank that did not join, the collective the others wait in, and every rank's stack; a straggler is a warning."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from tests.bounds import GENEROUS_RUN_S, GENEROUS_S
from tests.resources import hang_probes
from tests.test_e2e import ds_doctor, leftover_processes, read_report

#: `make test` runs these beside its two sessions and a spinning process per two cores (a hang cut short at its limit,
#: and its evidence, on a loaded node: the field's first runs are on busy nodes)
pytestmark = [pytest.mark.multirank, pytest.mark.loaded]
PROBES = {"DS_DOCTOR_EXTRA_PROBES": "tests.resources.hang_probes"}


def line_of(function: object, text: str) -> int:
    lines, first = inspect.getsourcelines(function)  # type: ignore[arg-type]
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture(scope="module")
def hung(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, str]:
    out = tmp_path_factory.mktemp("hangs")
    proc = ds_doctor(
        "run", "--level", "3", "-k", "hangs", "--out", str(out), extra_env=PROBES, timeout=GENEROUS_RUN_S
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # three timeouts
    assert leftover_processes(str(out)) == []
    return {r["case"]: r for r in read_report(out)["results"]}, out, proc.stdout


def ranks(result: dict) -> dict[int, dict]:
    return {r["rank"]: r for r in result["ranks"]}


def main_thread(rank: dict) -> dict:
    return next(s for s in rank["stacks"] if s["name"] == "MainThread")


def test_a_rank_elsewhere_is_named_with_its_stack_and_the_others_collective(hung) -> None:
    results, _, stdout = hung
    case = results["hangs[missing-ws2]"]
    assert case["outcome"] == "timeout"
    by_rank = ranks(case)
    waiting = main_thread(by_rank[0])["frames"][0]
    assert waiting["function"] == "all_reduce" and waiting["file"].endswith("distributed_c10d.py")
    stuck = main_thread(by_rank[1])["frames"][0]
    assert (stuck["function"], Path(stuck["file"]).name, stuck["line"]) == (
        "wait_for_me",
        "hang_probes.py",
        line_of(hang_probes.wait_for_me, "time.sleep"),
    )
    missing = [f for f in case["findings"] if f["invariant"] == "missing_rank"]
    assert len(missing) == 1 and missing[0]["rank"] == 1 and missing[0]["severity"] == "error"
    assert (
        "rank 1 never joined all_reduce #2 of process group 0:default_pg, which rank 0 is waiting in"
        in missing[0]["message"]
        and "wait_for_me" in missing[0]["message"]
    )
    assert by_rank[0]["collectives"] == [
        {
            "group": "0:default_pg",
            "last_completed": 1,
            "op": "all_reduce",
            "seq": 2,
            "sizes": "[[1024]] Float",
            "state": "scheduled",
        }
    ]
    assert by_rank[1]["collectives"][0]["op"] is None and by_rank[1]["collectives"][0]["last_completed"] == 1
    assert case["notes"]["forensics"]["collectives_from"] == "torch Flight Recorder"
    assert "rank 1 never joined all_reduce #2" in case["reason"]  # the one line the console shows
    assert "hangs[missing-ws2] TIMEOUT" in stdout


def test_py_spy_adds_native_frames_where_it_is_installed(hung) -> None:
    from ds_doctor.forensics.capture import py_spy

    case = hung[0]["hangs[missing-ws2]"]
    if py_spy() is None:  # the `hang` extra is optional: then the report says how to get native frames
        assert "install py-spy" in case["notes"]["forensics"]["native_stacks"]
        pytest.skip("py-spy is not installed (the `hang` extra): the Python stacks above are all there is")
    native = ranks(case)[1]["native_stack"]
    assert case["notes"]["forensics"]["native_stacks"] == "py-spy"
    assert "wait_for_me" in native and "libpython" in native  # Python frames interleaved with native ones


def test_a_collective_mismatch_names_both_sides(hung) -> None:
    case = hung[0]["hangs[mismatch-ws2]"]
    [finding] = [f for f in case["findings"] if f["invariant"] == "collective_mismatch"]
    assert finding["severity"] == "error"
    assert "rank 0 is in all_reduce of [[1024]] Float" in finding["message"]
    assert "rank 1 is in all_gather of [[8]] Float" in finding["message"]
    assert main_thread(ranks(case)[1])["frames"][0]["function"] == "all_gather"


def test_a_python_deadlock_shows_both_threads(hung) -> None:
    stacks = {s["name"]: s for s in ranks(hung[0]["hangs[deadlock-ws2]"])[1]["stacks"]}
    assert "ds-doctor-forensics" not in stacks  # the doctor's own thread is left out
    assert stacks["MainThread"]["frames"][0]["function"] == "deadlock"
    assert stacks["MainThread"]["frames"][0]["line"] == line_of(hang_probes.deadlock, "with lock:  # never")
    holder = [f["function"] for f in stacks["lock-holder"]["frames"]]
    assert "hold_then_block" in holder


def test_a_straggler_is_a_warning_naming_the_rank(hung) -> None:
    case = hung[0]["hangs[straggler-ws2]"]
    assert case["outcome"] == "pass"
    assert [(f["invariant"], f["rank"], f["stage"]) for f in case["findings"]] == [
        ("straggler", 1, "compute")
    ]
    stage_names = [s["stage"] for s in ranks(case)[1]["stages"]]
    assert stage_names == ["start", "warm-up", "compute", "sync"]


def test_the_markdown_shows_the_collectives_and_the_folded_stacks(hung) -> None:
    markdown = next(hung[1].glob("ds-doctor-*.md")).read_text()
    assert "**Collectives when it hung** (from torch Flight Recorder):" in markdown
    assert "<details><summary>rank 1: stacks (1 thread(s)), main thread in wait_for_me (" in markdown
    assert "frame of torch" in markdown  # torch internals folded


def test_a_hang_is_cut_short_at_its_timeout_and_its_evidence_bounded(hung) -> None:
    results, out, _ = hung
    run_dir = next(out.glob("run-*"))
    attempts = sorted(
        (d for d in run_dir.iterdir() if d.is_dir()), key=lambda d: int(d.name.rsplit("-", 1)[1])
    )
    for index, case in enumerate(["hangs[missing-ws2]", "hangs[mismatch-ws2]", "hangs[deadlock-ws2]"]):
        beat = json.loads((attempts[index] / "heartbeat-rank1.json").read_text())
        assert beat["case"] == case
        # the evidence is bounded at TAKE_BOUND_S (10 s), the hang cut short its timeout + 5 s after it started, on
        # an idle machine; a bound never applied waits for ever (the probe sleeps an hour)
        took = results[case]["notes"]["forensics"]["took_s"]
        assert took <= GENEROUS_S
        relaunched = (attempts[index + 1] / "command.txt").stat().st_mtime
        assert relaunched - beat["case_started"] - hang_probes.SPEC.timeout_s <= GENEROUS_S, case


def test_triage_reads_the_dump_that_run_left(hung) -> None:
    dumps = next(hung[1].glob("run-*/ws2-cpu-0/forensics/flight"))
    proc = ds_doctor("triage", str(dumps))
    assert proc.returncode == 0, proc.stderr
    assert "rank 0: in all_reduce #2 of 0:default_pg ([[1024]] Float; scheduled)" in proc.stdout
    assert "missing_rank: rank 1 never joined all_reduce #2" in proc.stdout
    data = json.loads(ds_doctor("triage", "--json", str(dumps)).stdout)
    assert [f["invariant"] for f in data["flight_recorder"]["findings"]] == ["missing_rank"]


def test_the_thin_record_gives_the_same_findings_without_the_recorder(tmp_path: Path) -> None:
    proc = ds_doctor(
        "run",
        "--level",
        "3",
        "-k",
        "hangs and (missing or mismatch)",
        "--out",
        str(tmp_path),
        extra_env={**PROBES, "DS_DOCTOR_COLLECTIVE_RECORD": "thin"},
        timeout=GENEROUS_RUN_S,  # two hangs never cut short: for ever
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    results = {r["case"]: r for r in read_report(tmp_path)["results"]}
    missing, mismatch = results["hangs[missing-ws2]"], results["hangs[mismatch-ws2]"]
    assert missing["notes"]["forensics"]["collectives_from"] == "ds-doctor thin record"
    assert [(f["invariant"], f["rank"]) for f in missing["findings"]] == [("missing_rank", 1)]
    assert len(mismatch["findings"]) == 1, (mismatch["outcome"], mismatch.get("reason"), mismatch["notes"])
    [finding] = mismatch["findings"]
    assert finding["invariant"] == "collective_mismatch"
    assert "rank 0 is in all_reduce of [[1024]] Float" in finding["message"]
    assert "rank 1 is in all_gather of [[8]] Float" in finding["message"]

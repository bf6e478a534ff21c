"""`ds-doctor triage` on the real exception texts the S0/S1 probes produced (tests/resources/triage)."""

from __future__ import annotations

import gzip
import json
import random
import re
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from ds_doctor.cli import main
from ds_doctor.knowledge.catalog import ISSUES
from ds_doctor.knowledge.issues import REGEX_FLAGS
from ds_doctor.knowledge.matching import _words, search
from ds_doctor.knowledge.triage import read_log, read_report, read_source, triage
from ds_doctor.reports.model import Verdict
from ds_doctor.userinput import UserInputError
from tests.bounds import GENEROUS_S

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "resources" / "triage"

#: resource file -> the one known issue it must match (captured from real runs: deepspeed 0.19.8, accelerate 1.15)
EXPECTED = {
    "s1_z2_frozen_not_in_param_names.txt": "ds_frozen_param_not_in_param_names",
    "s1_z3_dispatch_save.txt": "ds_z3_param_replaced_after_init",
    "s1_z1_assign_step.txt": "ds_replaced_trainable_param_not_trained",
    "s0_scheduler_before_prepare.txt": "acc_ds_placeholder_used_before_prepare",
    "s0_scheduler_second_prepare.txt": "acc_ds_placeholder_used_before_prepare",
    "s0_scheduler_second_prepare_auto.txt": "acc_ds_auto_value_unfilled",
    "s0_real_optimizer.txt": "acc_ds_optimizer_defined_twice",
    "s0_dummy_optim_no_config.txt": "acc_ds_optimizer_defined_twice",
    "s0_real_scheduler.txt": "acc_ds_scheduler_defined_twice",
    "s0_dummy_scheduler_no_config.txt": "acc_ds_scheduler_missing",
    "ds_zero_config_without_optimizer.txt": "ds_zero_config_without_optimizer",  # captured here, 0.19.8
    "s0_no_dataloader.txt": "acc_ds_auto_batch_needs_dataloader",
}
VERSIONS = {"deepspeed": "0.19.8", "accelerate": "1.15.0", "torch": "2.13.0"}


def test_every_captured_trace_is_in_the_table() -> None:
    assert sorted(p.name for p in TRACES.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize(("name", "issue_id"), sorted(EXPECTED.items()))
def test_each_real_trace_matches_exactly_its_issue(name: str, issue_id: str) -> None:
    matches = triage((TRACES / name).read_text(), VERSIONS)
    assert [m.issue.id for m in matches] == [issue_id]
    assert matches[0].version.version == VERSIONS[matches[0].package]
    assert matches[0].version.source == "this machine"  # these traces name no version
    collapsed = " ".join((TRACES / name).read_text().split())
    # the matched span
    assert matches[0].line and all(piece in collapsed for piece in matches[0].line.split(" … "))
    assert len(matches[0].line) <= 200


def test_versions_are_judged_against_the_installed_ones() -> None:
    text = "AttributeError: 'Linear' object has no attribute 'ds_grads_remaining'"
    assert [m.issue.verdict for m in triage(text, {"deepspeed": "0.19.2"})] == [Verdict.AFFECTED]
    assert [m.issue.verdict for m in triage(text, {"deepspeed": "0.19.8"})] == [Verdict.NOT_AFFECTED]
    assert [m.issue.verdict for m in triage(text, {})] == [Verdict.UNKNOWN]


def test_the_earliest_error_in_a_log_comes_first_and_secrets_are_scrubbed() -> None:
    log = (
        "rank0: HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789 ValueError: You cannot specify an optimizer in the "
        "config file and in the code at the same time\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n  exitcode  : -9 (pid: 12)\n"
    )
    matches = triage(log, VERSIONS)
    assert [m.issue.id for m in matches] == ["acc_ds_optimizer_defined_twice", "torchrun_child_sigkill"]
    assert "hf_abcdefghij" not in matches[0].line and "You cannot specify an optimizer" in matches[0].line


def test_cli_exit_codes_file_stdin_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["triage", str(TRACES / "s0_real_scheduler.txt")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("[acc_ds_scheduler_defined_twice]") and "remedy:" in out
    # the log names no version: the installed one is said, and said to be this machine's
    assert f"accelerate {version('accelerate')} (from this machine)" in out
    assert main(["triage", "--json", str(TRACES / "s1_z2_frozen_not_in_param_names.txt")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["id"] for m in data["matches"]] == ["ds_frozen_param_not_in_param_names"]
    assert {"cause", "remedy", "refs", "verdict", "version", "version_from", "matched"} <= set(
        data["matches"][0]
    )
    nothing = tmp_path / "clean.log"
    nothing.write_text("epoch 1 loss 0.25\n")
    assert main(["triage", str(nothing)]) == 1
    assert "no known issue" in capsys.readouterr().out
    for bad in ([str(tmp_path / "missing.log")], [str(tmp_path)]):  # an empty directory holds no dump
        assert main(["triage", *bad]) == 2
        err = capsys.readouterr().err
        assert err.startswith("ds-doctor: error:") and len(err.strip().splitlines()) == 1
    stdin = (TRACES / "s0_no_dataloader.txt").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "ds_doctor.cli", "triage", "-"],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0 and "[acc_ds_auto_batch_needs_dataloader]" in proc.stdout


# ---- what a stranger's log can do to triage (bounded input, bounded time) ---------------------------------------

#: one 256 KB line of each shape goes through normalise, the watchdog, the versions and the whole catalog (a
#: backtracking regex takes hours at that size; each shape takes about 0.3 s, linear: 1.2 s at 1 MB)
LONG_LINES = {
    "progress bars": "\r 45%|####   | 450/1000 [00:01<00:02]",
    "hashes": "#",
    "rank prefixes": "[rank0]: ",
    "spaces": " ",
    "bars never closed": "1%||1/1[",
    "a catalog head repeated": "server socket has failed to bind to ",
    "another catalog head": "failed to find frozen x ",
    "watchdog lines": "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
    "Timeout(ms)=1) ",
}


def test_a_long_line_of_any_shape_is_triaged_in_bounded_time() -> None:
    """Before: the progress-bar regex tried from every position of a line (20 KB 4 s, 80 KB 57 s); catalog
    patterns `head.*tail` retried at every repeated head (200 KB of one head, 7 s). Measured after: 0.1-0.4 s
    each, 1.4 s in all, on a loaded 2-core machine. At 289 entries (their wordings searched too) 12.8 s in all on a
    quiet one, until a text lacking a word every match of a pattern holds was no longer searched: 4.7 s."""
    took = {}
    for shape, unit in LONG_LINES.items():
        start = time.monotonic()
        read_log(unit * (2**18 // len(unit)), VERSIONS)
        took[shape] = time.monotonic() - start
    assert sum(took.values()) < GENEROUS_S, took  # a backtracking regex: hours at 1 MB


def test_many_lines_cut_at_one_width_are_joined_in_linear_time() -> None:
    start = time.monotonic()
    # 2 MB to unwrap, then 50,000 empty lines
    read_log(("x" * 80 + "\n") * 25_000 + "\n" * 50_000, VERSIONS)
    assert time.monotonic() - start < GENEROUS_S  # quadratic in 75,000 lines: hours


def test_the_bounded_search_finds_what_re_search_finds() -> None:
    """`triage.search` tries a `head.*tail` branch where its head first matches only: the same match as re.search,
    on every captured trace and on random mixes of the catalog's heads and tails."""
    patterns = [p for issue in ISSUES for p in (*issue.patterns, *issue.requires)]
    words = [
        "failed to find frozen ",
        " in named params",
        "file_baton.py",
        "wait",
        "stage3.py",
        "step",
        "\n",
        "unscale_and_clip_grads",
        "'status': 'NOT_AVAILABLE'",
        "'active_sub_modules'",
        " x ",
        "DeepSpeed",
        "server socket has failed to bind to ",
        "server socket has failed to listen on any local network address",
        "EADDRINUSE",
        "Address already in use",
        "op_builder",
        "FSDP",
    ]
    rng = random.Random(0)
    texts = [p.read_text() for p in TRACES.glob("*.txt")]
    texts += ["".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(1500)]
    for text in texts:
        for pattern in patterns:
            expected, found = re.search(pattern, text, REGEX_FLAGS), search(pattern, text)
            assert (expected and expected.span()) == (found and found.span()), (pattern, text[:200])


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        (
            "server socket has failed to bind to ",
            {"socket", "has", "failed", "to", "bind"},
        ),  # not "server": "myserver"
        ("^weight should have", {"weight", "should"}),
        (r"CUDA out of memory\. Tried", {"out", "of", "memory"}),  # "Tried" may go on: "Triedx"
        (r"(?i)a (?:find|get) frozen\s+x ", {"frozen", "x"}),  # either alternative: neither is sure
        (r"x (?:foo bar)? baz ", {"baz"}),  # an optional part holds nothing sure
        (r"\bNCCL\b.*timeout", {"nccl"}),
        (r"a (foo|bar) c", set()),  # a class of letters is no edge
        (r"(foo|bar) baz qux|zz", set()),
    ],
)
def test_the_words_every_match_holds_are_read_from_the_pattern(pattern: str, words: set[str]) -> None:
    assert _words(pattern) == words


def test_a_text_lacking_a_patterns_word_is_not_searched_and_case_folds_as_re_does() -> None:
    pattern = r"(?i)Socket has failed to bind "
    assert search(pattern, "the SOCKET HAS FAILED TO BIND here") is not None
    # U+212A KELVIN SIGN matches "k" under re's IGNORECASE, so it is read as one in the text's words
    assert search(r"(?i)x kill ", "x \u212aill ") is not None and re.search(r"(?i)x kill ", "x \u212aill ")
    assert search(pattern, "socket has failed to find ") is None


def test_a_log_source_is_read_with_bounds(tmp_path: Path) -> None:
    log = tmp_path / "train.log.gz"
    log.write_bytes(gzip.compress((TRACES / "s0_real_scheduler.txt").read_bytes()))
    source = read_source(str(log))
    assert source.notes == () and [m.issue.id for m in triage(source.text, VERSIONS)] == [
        "acc_ds_scheduler_defined_twice"
    ]
    with pytest.raises(UserInputError, match="more than 128 MiB"):
        read_source("/dev/zero")


def report_text(**change: object) -> str:
    from tests.test_cli import good_report_json

    return json.dumps({**json.loads(good_report_json()), **change})


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"results": [{"case": "x"}]}, "not a valid ds-doctor report at results/0"),
        ({"env": "x"}, "not a valid ds-doctor report at env"),
        ({"schema_version": 99}, "schema version 99 is newer"),
        ({"nodes": json.loads("[" * 70 + "]" * 70)}, "nested more than 64 levels deep"),
    ],
)
def test_a_report_shaped_json_that_is_no_report_is_one_line_exit_2(
    tmp_path: Path, change: dict, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UserInputError) as caught:
        read_report(report_text(**change), "r.json")
    assert needle in str(caught.value) and "\n" not in str(caught.value)
    (tmp_path / "r.json").write_text(report_text(**change))
    assert main(["triage", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ds-doctor: error:") and len(err.strip().splitlines()) == 1 and needle in err


def test_a_report_with_a_3_mb_reason_is_triaged_quickly() -> None:
    from ds_doctor.reports.model import CaseResult, Outcome

    case = CaseResult(
        probe="p",
        case="p[x-ws1]",
        scenario="s",
        level=1,
        world_size=1,
        device_kind="cpu",
        outcome=Outcome.FAIL,
        duration_s=1.0,
        reason="#" * 3_000_000,
    )
    start = time.monotonic()
    assert read_report(report_text(results=[case.to_dict()])) is not None
    assert time.monotonic() - start < GENEROUS_S  # a regex backtracking over 3 MB: hours


@pytest.mark.parametrize(
    "text",
    [
        "AssertionError: zero stage 2 requires\n    an optimizer",  # wrapped by the terminal it was copied from
        "AssertionError: zero stage 2 requires an\noptimizer",
        "AssertionError: zero  stage 2   requires an optimizer",  # doubled spaces
    ],
)
def test_a_message_broken_inside_a_sentence_is_still_matched(text: str) -> None:
    reading = read_log(text, VERSIONS)
    assert [m.issue.id for m in reading.matches] == ["ds_zero_config_without_optimizer"]
    assert reading.matches[0].line == "zero stage 2 requires an optimizer"


# ---- how strong a match is ----------------------------------------------------------------------------------------

S2_FRAMES = (
    '  File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/zero/stage3.py", line 2120, in '
    "unscale_and_clip_grads\nRuntimeError: Expected all tensors to be on the same device, but found at least "
    "two devices, cuda:0 and cpu!"
)


# its requires matched
@pytest.mark.parametrize(
    ("text", "strength", "context"),
    [
        (S2_FRAMES, "message and context", 'stage3.py", line 2120, in unscale_and_clip_grads'),
        (
            '  File "/usr/lib/python3/site-packages/deepspeed/runtime/engine.py", line 1505, in '
            "_configure_zero_optimizer\n"
            "AssertionError: zero stage 2 requires an optimizer",
            "message and frames",
            "deepspeed/runtime/engine.py",
        ),
        ("AssertionError: zero stage 2 requires an optimizer", "message only", None),
        # a torch frame backs nothing: every traceback passes through torch
        (
            '  File "/x/site-packages/torch/distributed/fsdp/_flat_param.py", line 771, in _validate\n'
            "ValueError: Cannot flatten integer dtype tensors",
            "message only",
            None,
        ),
    ],
)
def test_each_match_says_how_strong_it_is(
    text: str, strength: str, context: str | None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (match,) = triage(text, VERSIONS)
    assert match.strength == strength and (context is None) == (match.context == ())
    assert context is None or context in match.context[0]
    log = tmp_path / "t.log"
    log.write_text(text)
    assert main(["triage", str(log)]) == 0
    assert f"  strength: {strength}" in capsys.readouterr().out
    assert main(["triage", "--json", str(log)]) == 0
    data = json.loads(capsys.readouterr().out)["matches"][0]
    assert (data["strength"], len(data["context"])) == (strength, 0 if context is None else 1)
    assert main(["triage", "--markdown", str(log)]) == 0
    markdown = capsys.readouterr().out
    assert markdown.startswith("## ds-doctor triage\n") and f"- **strength:** {strength}" in markdown


def test_markdown_and_json_together_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["triage", "--json", "--markdown", str(TRACES / "s0_real_scheduler.txt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ds-doctor: error:") and len(err.strip().splitlines()) == 1


def test_the_nccl_version_the_log_names_decides_the_duplicate_gpu_variant() -> None:
    from tests.knowledge.test_catalog import DUPLICATE_GPU_NCCL_2_26

    verdicts = {
        m.issue.id: (m.issue.verdict, m.version.version, m.version.source)
        for m in read_log(DUPLICATE_GPU_NCCL_2_26, {"nccl": "2.21.5"}).matches
    }
    assert verdicts["nccl_duplicate_gpu_subgroups_before_set_device"] == (
        Verdict.AFFECTED,
        "2.26.5",
        "the log",
    )
    older = DUPLICATE_GPU_NCCL_2_26.replace("2.26.5", "2.19.3")
    assert {m.issue.id: m.issue.verdict for m in read_log(older, {}).matches}[
        "nccl_duplicate_gpu_subgroups_before_set_device"
    ] == Verdict.NOT_AFFECTED


def test_a_second_text_compiles_no_pattern_again() -> None:
    """Every pattern triage searches (the catalog's and those made of its wordings) stays compiled between texts: a
    cache smaller than their number, walked in the same order each time, kept none (66 ms a text where 3 ms do)."""
    from ds_doctor.knowledge.matching import _branches

    text = 'Traceback (most recent call last):\n  File "train.py", line 1\nRuntimeError: CUDA out of memory.'
    read_log(text, {})
    before = _branches.cache_info()
    read_log(text.replace("train.py", "other.py"), {})
    after = _branches.cache_info()
    assert after.misses == before.misses, (before, after)
    assert after.currsize < (after.maxsize or 0)

"""Exit 3 is for ds-doctor's own bugs only: every CLI option fed hostile values, and every field of a report file
given wrong types, wrong shapes and deep nesting, ends in exit 0, 1 or 2, with at most one line on stderr for a
usage error, no traceback, in bounded time (issue 27). Derandomized, on a fixed budget in CI
(`DS_DOCTOR_FUZZ_EXAMPLES`, default 40 per test); `make fuzz` runs it longer."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from ds_doctor.cli import main  # noqa: E402
from tests.test_cli import good_report_json  # noqa: E402

EXAMPLES = int(os.environ.get("DS_DOCTOR_FUZZ_EXAMPLES", "40"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
BOUND_S = 60  # one invocation; a hang fails the example instead of the suite

HOSTILE = [
    "nan",
    "-nan",
    "NaN",
    "inf",
    "-inf",
    "1e308",
    "-1e308",
    "1e-400",
    "9" * 400,
    "0",
    "-1",
    "0x10",
    "1_000",
    "",
    " ",
    "\x00",
    "a\nb",
    "\r\x1b[2J",
    "caf\udce9",
    "../../etc/passwd",
    "/dev/zero",
    "/dev/null",
    "/",
    "/proc/self/fd/1",
    "%s%n%x",
    "$(reboot)",
    "`id`",
    "x" * 5000,
    "(" * 300,
    "not",
    "-",
    "--",
    "hf:",
    "a:b",
    ":",
    "[::1]:",
    "h:99999",
    '{"a": 1}',
    "*",
    "\u202e",
    "😀",
    "None",
    "true",
    "1" * 30,
]

NUMBER_LIKE = st.one_of(
    st.sampled_from(HOSTILE),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
)
VALUES = st.one_of(st.sampled_from(HOSTILE), NUMBER_LIKE, st.text(max_size=60))

RUN_OPTIONS = [
    "--timeout",
    "--join-timeout",
    "--tolerance",
    "--suspect-below",
    "--nproc",
    "--nnodes",
    "--node-rank",
    "--rdzv-id",
    "--rdzv-endpoint",
    "--junit",
    "--prometheus",
    "--baseline",
    "--deepspeed-config",
    "--accelerate-config",
    "--model",
    "--freeze",
    "-k",
    "--level",
]


@contextlib.contextmanager
def bounded(seconds: int = BOUND_S) -> Iterator[None]:
    def expired(*_: Any) -> None:
        raise TimeoutError(f"an invocation ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def inside(folder: Path) -> Iterator[None]:
    """A relative path among the values lands in the example's own folder, never in the repository."""
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def invoke(capsys: pytest.CaptureFixture[str], args: list[str], folder: Path) -> tuple[int, str]:
    with bounded(), inside(folder):
        code = main(args)
    _, err = capsys.readouterr()
    shown = [a if len(a) < 80 else a[:40] + f"…({len(a)} chars)" for a in args]
    assert code in (0, 1, 2), (shown, code, err[-600:])
    assert "Traceback" not in err, (shown, err[-2000:])
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and err.startswith("ds-doctor: error:"), (
            shown,
            err[-2000:],
        )
    return code, err


@FUZZ
@given(option=st.sampled_from(RUN_OPTIONS), value=VALUES)
def test_run_options_take_any_value(capsys, tmp_path_factory, option: str, value: str) -> None:
    out = tmp_path_factory.mktemp("run")
    args = ["run", "--level", "1", "--out", str(out / "out")]
    # the cluster options come together; a -k that
    if option in ("--node-rank", "--rdzv-endpoint", "--nnodes"):
        # selects nothing stops a valid set at exit 2
        args += ["--join-timeout", "2", "-k", "zz_selects_nothing"]
        args += {
            "--nnodes": ["--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:1"],
            "--node-rank": ["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:1"],
            "--rdzv-endpoint": ["--nnodes", "2", "--node-rank", "0"],
        }[option]
    invoke(capsys, [*args, option, value], out)


@FUZZ
@given(
    command=st.sampled_from(
        [
            "diff-tolerance",
            "triage-world-size",
            "triage-file",
            "report-path",
            "list-k",
            "diff-out",
            "report-junit",
            "bisect-package",
            "bisect-good",
        ]
    ),
    value=VALUES,
)
def test_other_commands_take_any_value(capsys, tmp_path_factory, command: str, value: str) -> None:
    folder = tmp_path_factory.mktemp("other")
    good = folder / "good.json"
    good.write_text(good_report_json())
    args = {
        "diff-tolerance": ["diff", str(good), str(good), "--tolerance", value],
        "diff-out": ["diff", str(good), str(good), "--out", value],
        "triage-world-size": ["triage", "--world-size", value, str(good)],
        "triage-file": ["triage", value],
        "report-path": ["report", value, "--out", str(folder / "r")],
        "report-junit": ["report", str(good), "--out", str(folder / "r"), "--junit", value],
        "list-k": ["list", "-k", value],
        # releases from an empty folder: never the network
        "bisect-package": [
            "bisect",
            value,
            "--good",
            "1.0",
            "--bad",
            "2.0",
            "-k",
            "comm",
            "--find-links",
            str(folder),
        ],
        "bisect-good": [
            "bisect",
            "demo",
            "--good",
            value,
            "--bad",
            "2.0",
            "-k",
            "comm",
            "--find-links",
            str(folder),
        ],
    }[command]
    if command in ("diff-out", "report-junit") and value in ("/", "-", "--"):
        return
    if command == "triage-file" and value in ("-", "--"):
        return  # stdin: pytest's is closed
    invoke(capsys, args, folder)


def nest(depth: int) -> list:
    """`depth` lists, one inside the next, built without recursion (json.loads of it recursed in the test itself)."""
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


def mutations() -> st.SearchStrategy[tuple[list[Any], Any]]:
    """A path into a report and what to put there: wrong types, wrong shapes, deep nesting, hostile text."""
    nested = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=8,
    )
    deep = st.integers(min_value=50, max_value=3000).map(nest)
    value = st.one_of(
        nested,
        deep,
        st.sampled_from([None, "", "x" * 10_000, -1, 10**400, 1e308, [], {}, True]),
        st.sampled_from(HOSTILE),
    )
    return st.tuples(
        st.lists(
            st.sampled_from(
                [
                    "results",
                    0,
                    "hardware",
                    "host",
                    "env",
                    "packages",
                    "findings",
                    "outcome",
                    "measures",
                    "started_at",
                    "tool",
                    "version",
                    "ranks",
                    "device_map",
                    "duration_s",
                    "case",
                    "known_issue",
                    "notes",
                    "gpus",
                    "schema_version",
                    "level",
                    "series",
                ]
            ),
            min_size=1,
            max_size=4,
        ),
        value,
    )


def plant(data: Any, path: list[Any], value: Any) -> Any:
    node = data
    for step in path[:-1]:
        if isinstance(node, dict) and isinstance(step, str):
            node = node.setdefault(step, {})
        elif isinstance(node, list) and isinstance(step, int) and node:
            node = node[step % len(node)]
        else:
            return data
    if isinstance(node, dict) and isinstance(path[-1], str):
        node[path[-1]] = value
    elif isinstance(node, list) and isinstance(path[-1], int) and node:
        node[path[-1] % len(node)] = value
    return data


@FUZZ
@given(mutation=mutations())
def test_a_report_with_any_field_broken_is_never_exit_3(capsys, tmp_path_factory, mutation) -> None:
    from tests.reports.samples import a_report, every_outcome

    folder = tmp_path_factory.mktemp("report")
    data = plant(json.loads(a_report(every_outcome()).to_json()), *mutation)
    try:
        text = json.dumps(data)
    except (ValueError, RecursionError):
        return
    broken, good = folder / "broken.json", folder / "good.json"
    broken.write_text(text)
    good.write_text(good_report_json())
    for args in (
        ["report", str(broken), "--out", str(folder / "r")],
        ["diff", str(good), str(broken)],
        ["triage", str(broken)],
    ):
        invoke(capsys, args, folder)


def test_the_fuzz_budget_is_fixed_and_derandomized() -> None:
    assert FUZZ.derandomize and FUZZ.max_examples == EXAMPLES
    lines = Path(__file__).read_text().splitlines()
    assert sum(line == "@FUZZ" for line in lines) == sum(line.startswith("@given(") for line in lines) == 3

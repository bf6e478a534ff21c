"""`run --with PKG==VER`: a real overlay built by pip from local wheels (no index), the cases run on both stacks
under real torchrun, and every way an overlay cannot be had is one line, exit 2."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ds_doctor.releases.overlay import (
    MARKER,
    OverlayError,
    Release,
    build,
    check_never_replaced,
    parse_release,
    parse_releases,
)
from ds_doctor.reports.markdown import render_markdown
from ds_doctor.reports.model import Outcome, Report, Verdict
from ds_doctor.reports.sides import changes
from ds_doctor.run.build import build_report
from tests.reports.samples import NOW, case, issue
from tests.test_e2e import ROOT, ds_doctor, read_report

# prodigy-plus-schedule-free 1.8.51 (Apache 2.0), the S4 release
WHEELS = ROOT / "tests" / "resources" / "wheels"
PRODIGY = "prodigy-plus-schedule-free==1.8.51"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("deepspeed>=0.14", "name one exact release"),
        ("deepspeed", "name one exact release"),
        ("deepspeed==0.14.*", "name one exact release"),
        ("deepspeed[1bit]==0.14.2", "name one exact release"),
        ("deepspeed @ https://x/y.whl", "name one exact release"),
        ("dee pspeed==1", "not a release"),
        ("==1.0", "not a release"),
        ("x" * 5000, "name one exact release"),
        ("x==1\n#", "not a release"),
    ],
)
def test_a_release_is_one_exact_version(text: str, said: str) -> None:
    with pytest.raises(OverlayError, match=said) as caught:
        parse_release(text)
    assert "\n" not in caught.value.format_message() and len(caught.value.format_message()) < 400


def test_names_are_canonical_and_named_once() -> None:
    assert parse_release("Prodigy_Plus.Schedule-Free==1.8.51") == Release(
        "prodigy-plus-schedule-free", "1.8.51"
    )
    with pytest.raises(OverlayError, match="names deepspeed more than once"):
        parse_releases(["deepspeed==0.14.2", "DeepSpeed==0.14.3"])


def test_torch_is_never_replaced_unless_named() -> None:
    resolved = [("deepspeed", "0.14.2", ""), ("torch", "2.3.1", "https://x/torch.whl")]
    with pytest.raises(
        OverlayError, match=r"needs torch 2\.3\.1 \(installed: .*\); name --with torch==\.\.\. to "
    ):
        check_never_replaced(resolved, (Release("deepspeed", "0.14.2"),))
    check_never_replaced(resolved, (Release("deepspeed", "0.14.2"), Release("torch", "2.3.1")))


def test_an_overlay_from_a_local_wheel_is_built_once_and_imports(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DS_DOCTOR_STACKS", str(tmp_path / "stacks"))
    said: list[str] = []
    overlay = build(parse_releases([PRODIGY]), WHEELS, said.append)
    assert overlay.packages == {"prodigy-plus-schedule-free": "1.8.51"}  # resolved against this environment
    assert (overlay.path / MARKER).is_file() and (overlay.path / "prodigyplus").is_dir()
    assert said and "building the overlay prodigy-plus-schedule-free==1.8.51" in said[0]
    env = {**os.environ, "PYTHONPATH": str(overlay.path)}
    probe = (
        "import importlib.metadata as m, prodigyplus; print(m.version('prodigy-plus-schedule-free'), "
        "prodigyplus.__file__)"
    )
    seen = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120
    ).stdout
    assert seen.startswith("1.8.51 " + str(overlay.path))
    again: list[str] = []
    assert build(parse_releases([PRODIGY]), WHEELS, again.append) == overlay and again == []  # from the cache
    (overlay.path / MARKER).write_text("{not json")  # a damaged cache entry is built again, not trusted
    rebuilt: list[str] = []
    assert build(parse_releases([PRODIGY]), WHEELS, rebuilt.append) == overlay and rebuilt


def make_wheel(
    folder: Path, name: str, body: str, requires: tuple[str, ...] = (), version: str = "1.0"
) -> None:
    """A real distribution built by pip from a project written here (requiring `requires`)."""
    project = folder / f"src-{name}-{version}"
    (project / name).mkdir(parents=True)
    (project / name / "__init__.py").write_text(body)
    (project / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{name}"
        version = "{version}"
        dependencies = {list(requires)!r}
        """)
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(folder),
            str(project),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_what_cannot_be_overlaid_is_one_line_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    from ds_doctor.cli import main

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    make_wheel(wheels, "broken_on_import", "raise ImportError('needs a torch this node does not have')\n")
    monkeypatch.setenv("DS_DOCTOR_STACKS", str(tmp_path / "stacks"))
    monkeypatch.chdir(tmp_path)
    for args, said in [
        (
            ["--with", "prodigy-plus-schedule-free==0.0.1", "--find-links", str(WHEELS)],
            "pip cannot install it: Could not find a version that satisfies the requirement "
            "prodigy-plus-schedule-free==0.0.1 (from versions: 1.8.51)",
        ),
        (
            ["--with", "broken_on_import==1.0", "--find-links", str(wheels)],
            "--with broken-on-import==1.0: does not import on this stack: import broken_on_import: "
            "ImportError: needs a "
            "torch this node does not have",
        ),
        (["--with", PRODIGY, "--find-links", str(tmp_path / "absent")], "not a folder"),
        (["--find-links", str(WHEELS)], "--find-links is for --with"),
        (["--with", "deepspeed>0.14"], "name one exact release"),
        (
            ["--with", PRODIGY, "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:29400"],
            "one node",
        ),
    ]:
        code = main(["run", "-k", "comm", "--out", str(tmp_path / "out"), *args])
        err = capsys.readouterr().err
        last = err.strip().splitlines()[-1]
        assert code == 2 and last.startswith("ds-doctor: error: ") and said in last, (args, err)
        assert "Traceback" not in err and not (tmp_path / "out").exists()  # nothing ran, nothing written
    # no half-built overlay
    assert not [p for p in (tmp_path / "stacks").iterdir() if not (p / MARKER).exists()]


@pytest.mark.multirank
def test_the_cases_run_on_both_stacks_side_by_side(tmp_path: Path) -> None:
    proc = ds_doctor(
        "run",
        "-k",
        "optimizer_state_placement and prodigy-plus-schedule-free and ws2",
        "--out",
        str(tmp_path / "out"),
        "--with",
        PRODIGY,
        "--find-links",
        str(WHEELS),
        "--json",
        extra_env={"DS_DOCTOR_STACKS": str(tmp_path / "stacks")},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = read_report(tmp_path / "out")
    assert json.loads(proc.stdout) == data
    installed, overlay = data["stacks"]
    assert (
        installed["name"] == "installed" and installed["packages"]["prodigy-plus-schedule-free"] != "1.8.51"
    )
    assert overlay["name"] == PRODIGY and overlay["packages"] == {"prodigy-plus-schedule-free": "1.8.51"}
    results = {(r["case"], r.get("stack")): r for r in data["results"]}
    case_id = "optimizer_state_placement[prodigy-plus-schedule-free-ws2]"
    here, there = results[(case_id, None)], results[(case_id, PRODIGY)]
    # the ranks imported what each stack holds, and each verdict is judged on that stack's version
    assert here["notes"]["optimizer_version"] == installed["packages"]["prodigy-plus-schedule-free"]
    assert there["notes"]["optimizer_version"] == "1.8.51"
    assert there["known_issue"]["id"] == "prodigy_group_tensors_left_on_cpu"
    assert (here["known_issue"]["verdict"], there["known_issue"]["verdict"]) == ("not_affected", "affected")
    # on CPU the misplacement cannot show (S4 is GPU-only)
    assert here["outcome"] == there["outcome"] == "pass"
    markdown = next((tmp_path / "out").glob("*.md")).read_text()
    assert f"| `{case_id}` | pass | pass |" in markdown and "| `prodigy-plus-schedule-free` |" in markdown
    # the console's line names the stack (--json: on stderr)
    assert f"{case_id}@{PRODIGY} PASS" in proc.stderr
    stack_dirs = list((tmp_path / "out").glob("run-*/stack-prodigy-plus-schedule-free*1.8.51/ws2-cpu-0"))
    assert stack_dirs, "the overlay's launches are in the run directory"
    # the run directory alone gives the same report back: both stacks' cases, each judged on its own versions
    rebuilt = ds_doctor(
        "report", str(stack_dirs[0].parent.parent), "--out", str(tmp_path / "rebuilt"), "--json"
    )
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    again = json.loads(rebuilt.stdout)

    def verdicts(report: dict) -> list[tuple]:
        return sorted(
            (r["case"], r.get("stack") or "", r["outcome"], (r.get("known_issue") or {}).get("verdict") or "")
            for r in report["results"]
        )

    assert again["stacks"] == data["stacks"] and verdicts(again) == verdicts(data)


def test_a_known_issue_that_appears_or_clears_between_stacks_is_said() -> None:
    def on(name: str, outcome: Outcome, verdict: Verdict, stack: str | None = None):
        return dataclasses.replace(case(outcome, name), known_issue=issue("ds_x", verdict), stack=stack)

    results = [
        on("z1", Outcome.XPASS, Verdict.NOT_AFFECTED),
        on("z1", Outcome.XFAIL, Verdict.AFFECTED, "deepspeed==0.14.2"),
        on("z2", Outcome.XFAIL, Verdict.AFFECTED),
        on("z2", Outcome.XPASS, Verdict.NOT_AFFECTED, "deepspeed==0.14.3"),
        on("z3", Outcome.XFAIL, Verdict.AFFECTED),
        on("z3", Outcome.XFAIL, Verdict.AFFECTED, "deepspeed==0.14.2"),
    ]
    report = build_report(
        started=NOW,
        finished=NOW,
        level=3,
        argv=("run",),
        env={"packages": {}},
        hardware={"host": "h", "cpus": 2, "gpus": []},
        run_dir=None,
        results=results,
        stacks=(
            {"name": "installed", "packages": {"deepspeed": "0.19.8"}},
            {"name": "deepspeed==0.14.2", "packages": {"deepspeed": "0.14.2"}},
            {"name": "deepspeed==0.14.3", "packages": {"deepspeed": "0.14.3"}},
        ),
    )
    # stacks and each result's stack round-trip
    assert Report.from_dict(json.loads(report.to_json())) == report
    assert len({r.key for r in report.results}) == 6
    assert [c.line() for c in changes(report)] == [  # z3 shows on both: nothing appears or clears
        "deepspeed 0.19.8 -> 0.14.2 brings ds_x: frozen_param_names[z1-ws1] xpass -> xfail (measured here, cpu, "
        "2026-11-21)",
        "deepspeed 0.19.8 -> 0.14.3 clears ds_x: frozen_param_names[z2-ws1] xfail -> xpass (measured here, cpu, "
        "2026-11-21)",
    ]
    markdown = render_markdown(report)
    assert "| `frozen_param_names[z1-ws1]` | xpass | xfail | - |" in markdown and "brings ds_x" in markdown


def test_an_overlay_cache_others_can_write_is_refused_in_one_line(tmp_path: Path, monkeypatch) -> None:
    """Every rank runs an overlay's sitecustomize.py: a cache folder another user can write is refused, never used."""
    cache = tmp_path / "stacks"
    cache.mkdir()
    cache.chmod(0o777)
    monkeypatch.setenv("DS_DOCTOR_STACKS", str(cache))
    with pytest.raises(
        OverlayError, match=r"cannot be trusted: .*stacks is writable by others \(mode drwxrwxrwx\)"
    ):
        build(parse_releases([PRODIGY]), WHEELS)
    cache.chmod(0o1777)  # /tmp's way is no better for the cache itself: anyone may add a key there
    with pytest.raises(OverlayError, match="writable by others"):
        build(parse_releases([PRODIGY]), WHEELS)


def test_a_cached_overlay_is_used_only_as_built(tmp_path: Path, monkeypatch) -> None:
    """A marker alone proves nothing: an overlay whose files are not what their RECORD lists, whose marker names a
    release that is not installed there, or whose folder another user owns or can write is built again."""
    monkeypatch.setenv("DS_DOCTOR_STACKS", str(tmp_path / "stacks"))
    overlay = build(parse_releases([PRODIGY]), WHEELS)
    init = overlay.path / "prodigyplus" / "__init__.py"

    def rebuilt_because() -> str:
        said: list[str] = []
        assert build(parse_releases([PRODIGY]), WHEELS, said.append) == overlay
        assert said, "used as it was"
        return said[0]

    init.write_text(init.read_text() + "\nimport os  # planted\n")
    assert "prodigyplus/__init__.py is not the file its RECORD lists" in rebuilt_because()
    marker = overlay.path / MARKER
    marker.write_text(json.dumps({"packages": {"prodigy-plus-schedule-free": "1.9.2"}}))
    assert "prodigy-plus-schedule-free 1.9.2 is not installed there" in rebuilt_because()
    overlay.path.chmod(0o777)
    assert "is writable by others" in rebuilt_because()
    os.chown(overlay.path, 65534, 65534)
    assert "belongs to uid 65534" in rebuilt_because()
    said: list[str] = []
    build(parse_releases([PRODIGY]), WHEELS, said.append)
    assert said == []  # built again as it should be: used from now on

"""`ds-doctor bisect`: the binary search over releases, and a real bisection end to end from local wheels (no
index): a package built here in six releases, the regression planted in 1.3, one release that does not import."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ds_doctor.releases.bisect import BisectError, between, bisect, releases_in
from ds_doctor.releases.overlay import OverlayError, Release
from tests.releases.test_overlay import make_wheel
from tests.test_e2e import ds_doctor

VERSIONS = ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5"]


def planted(first_bad: str, broken: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    tried: list[str] = []

    def runner(release: Release) -> dict[str, str]:
        tried.append(release.version)
        if release.version in broken:
            raise OverlayError("does not import on this stack: import demo: ImportError: no")
        return {"demo[scale-ws1]": "fail" if release.version >= first_bad else "pass"}

    return runner, tried


def test_the_search_finds_the_first_release_that_changes_in_few_runs() -> None:
    runner, tried = planted("1.3")
    found = bisect("demo", "demo", VERSIONS, runner)
    assert (found.last_good, found.first_changed) == ("1.2", "1.3")
    assert tried == ["1.0", "1.5", "1.2", "1.3"]  # the ends, then halves: not every release
    assert [s.verdict for s in found.steps] == ["good", "changed", "good", "changed"]


def test_a_release_that_does_not_run_is_skipped_listed_and_stepped_around() -> None:
    runner, tried = planted("1.3", broken=("1.2",))
    found = bisect("demo", "demo", VERSIONS, runner)
    assert (found.last_good, found.first_changed) == ("1.1", "1.3")
    assert tried == ["1.0", "1.5", "1.2", "1.3", "1.1"]
    (skipped,) = [s for s in found.steps if s.verdict == "skipped"]
    assert skipped.version == "1.2" and "does not import" in str(skipped.reason)


def test_what_cannot_be_bisected_says_why() -> None:
    runner, _ = planted("9.9")
    with pytest.raises(BisectError, match=r"end the same at 1\.0 and 1\.5"):
        bisect("demo", "demo", VERSIONS, runner)
    with pytest.raises(BisectError, match=r"1\.7 is not among the releases found"):
        between(VERSIONS, "1.0", "1.7")
    assert between(VERSIONS, "1.4", "1.1") == ["1.4", "1.3", "1.2", "1.1"]  # a fix searched for backwards
    assert between([*VERSIONS, "1.4rc1"], "1.0", "1.5") == VERSIONS  # no pre-release unless an end is one
    with pytest.raises(BisectError, match="is not a package name"):
        releases_in(Path("."), "--index-url=http://elsewhere")


def test_the_release_installed_here_runs_as_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip has nothing to put into an overlay of the installed release: the bisection runs the stack as installed
    for it (and an overlay for any other), each taking its own results only."""
    from ds_doctor import cli_bisect
    from ds_doctor.releases import overlay
    from ds_doctor.reports.model import Outcome
    from ds_doctor.run import pipeline
    from tests.reports.samples import a_report, case

    built: list[str] = []
    monkeypatch.setattr(overlay, "installed", lambda name: "1.15.0")
    monkeypatch.setattr(
        overlay, "build", lambda releases, *a, **k: built.append(releases[0].spec) or _Stack("demo==1.1.0")
    )

    def run(options: pipeline.RunOptions) -> tuple[object, dict]:
        stacked = [o.name for o in options.overlays]
        results = [dataclasses.replace(case(Outcome.XPASS, "demo"), stack=name) for name in stacked] + (
            [] if options.overlays_only else [case(Outcome.XFAIL, "demo")]
        )
        return a_report(results), {}

    monkeypatch.setattr(pipeline, "run", run)
    runner = cli_bisect.overlay_runner(3, "demo", tmp_path, None, False)
    assert runner(Release("demo", "1.15.0")) == {"frozen_param_names[demo-ws1]": "xfail"} and built == []
    assert runner(Release("demo", "1.1.0")) == {"frozen_param_names[demo-ws1]": "xpass"}
    assert built == ["demo==1.1.0"]


@dataclasses.dataclass(frozen=True)
class _Stack:
    name: str


@pytest.mark.multirank
def test_bisect_finds_the_release_that_broke_a_case_from_local_wheels(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in VERSIONS:
        if version == "1.2":
            body = "raise ImportError('1.2 needs a library this node does not have')\n"
        else:
            body = f"def scale():\n    return {0.5 if version >= '1.3' else 1.0}\n"
        make_wheel(wheels, "dsd_bisect_demo", body, version=version)
    assert releases_in(wheels, "dsd-bisect-demo") == VERSIONS
    out = tmp_path / "out"
    proc = ds_doctor(
        "bisect",
        "dsd-bisect-demo",
        "--good",
        "1.0",
        "--bad",
        "1.5",
        "-k",
        "bisect_demo",
        "--find-links",
        str(wheels),
        "--out",
        str(out),
        extra_env={
            "DS_DOCTOR_EXTRA_PROBES": "tests.resources.bisect_probes",
            "DS_DOCTOR_STACKS": str(tmp_path / "s"),
        },
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith(
        "bisect dsd-bisect-demo: the selected cases first change at dsd-bisect-demo 1.3 "
        "(last release as at --good: 1.1)"
    )
    found = json.loads((out / "bisect.json").read_text())
    verdicts = {s["version"]: s["verdict"] for s in found["steps"]}
    assert verdicts == {"1.0": "good", "1.5": "changed", "1.2": "skipped", "1.3": "changed", "1.1": "good"}
    assert found["steps"][0]["outcomes"] == {"bisect_demo[scale-ws1]": "pass"}
    assert found["steps"][1]["outcomes"] == {"bisect_demo[scale-ws1]": "fail"}
    markdown = (out / "bisect.md").read_text()
    assert "| 1.2 | skipped |" in markdown and "does not import on this stack" in markdown
    assert list(out.glob("dsd-bisect-demo-1.3/ds-doctor-*.json"))  # each release's own report, the evidence

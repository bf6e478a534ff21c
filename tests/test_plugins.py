"""The probe plugin API: a probe in a package of its own, installed with pip and registered only through the
`ds_doctor.probes` entry point, is listed and runs under a real torchrun like a built-in one; and
docs/writing-probes.md shows exactly that probe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ds_doctor import plugins
from ds_doctor.probe import registry

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tests" / "resources" / "plugin_pkg"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package, built and installed by pip into a directory of its own (no index, no deps)."""
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(target),
            str(PACKAGE),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=build,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert list(target.glob("ds_doctor_example_probe-*.dist-info/entry_points.txt"))
    return target


def ds_doctor(*args: str, site: Path | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != registry.EXTRA_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *([str(site)] if site else [])])
    return subprocess.run(
        [sys.executable, "-m", "ds_doctor.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )


def test_the_plugin_module_exports_what_a_probe_author_needs() -> None:
    assert {"ProbeSpec", "Variant", "Requirement", "ProbeContext", "Finding", "Severity"} <= set(
        plugins.__all__
    )
    assert plugins.ENTRY_POINT_GROUP == "ds_doctor.probes"


@pytest.mark.multirank
def test_a_probe_registered_only_by_its_entry_point_is_listed_and_runs(
    installed: Path, tmp_path: Path
) -> None:
    assert ds_doctor("list", "-k", "ddp_sync", site=None).returncode == 2  # not installed: no such case
    listed = ds_doctor("list", "-k", "ddp_sync", site=installed)
    assert (
        listed.returncode == 0
        and "ddp_sync[linear-ws2]" in listed.stdout
        and "ddp_sync[wide-ws1]" in listed.stdout
    )
    proc = ds_doctor("run", "-k", "ddp_sync and ws2", "--out", str(tmp_path), "--json", site=installed)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    results = {r["case"]: r for r in json.loads(proc.stdout)["results"]}
    # level 2: the representative variant (one launch: ws2 only)
    assert set(results) == {"ddp_sync[linear-ws2]"}
    ranks = results["ddp_sync[linear-ws2]"]
    assert ranks["outcome"] == "pass" and ranks["findings"] == []
    assert {(r["rank"], r["path"]) for r in ranks["device_map"] if r["role"] == "param"} == {
        (rank, name) for rank in (0, 1) for name in ("weight", "bias")
    }


def test_registry_errors_name_both_sides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "twin_probe.py").write_text(
        "from ds_doctor.probes.comm import SPEC, run, variants  # noqa: F401\n"
    )
    (tmp_path / "not_a_probe.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(registry.EXTRA_ENV, "twin_probe")
    with pytest.raises(
        registry.RegistryError, match=r"duplicate probe name 'comm': twin_probe \(DS_DOCTOR_EXTRA"
    ):
        registry.load_modules()
    monkeypatch.setenv(registry.EXTRA_ENV, "not_a_probe")
    with pytest.raises(registry.RegistryError, match="is not a probe: it needs SPEC"):
        registry.load_modules()
    monkeypatch.setenv(registry.EXTRA_ENV, "no_such_module_ds_doctor")
    with pytest.raises(registry.RegistryError, match="does not load"):
        registry.load_modules()
    monkeypatch.delenv(registry.EXTRA_ENV)
    with pytest.raises(KeyError, match="zero_offload"):  # an unknown name lists the valid ones
        registry.get("nope")


def test_the_guide_shows_the_tested_probe() -> None:
    """docs/writing-probes.md's complete probe and entry point are the files this test installs."""
    guide = (ROOT / "docs" / "writing-probes.md").read_text()
    blocks = re.findall(r"```(?:python|toml)\n(.*?)```", guide, re.S)
    assert (PACKAGE / "ds_doctor_example_probe" / "ddp_sync.py").read_text() in blocks
    assert any('[project.entry-points."ds_doctor.probes"]' in block for block in blocks)

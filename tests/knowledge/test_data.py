"""The known-issue data files: every shipped entry loads and checks out on its own terms, and the loader refuses a
planted bad entry with a message naming the file and the entry."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from ds_doctor.knowledge import catalog
from ds_doctor.knowledge.issues import REGEX_FLAGS, KnownIssue
from ds_doctor.knowledge.load import LIBRARIES, CatalogError, data_files, load_catalog, load_file

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = load_catalog()


def test_the_data_folder_holds_one_file_per_library_the_measurements_and_the_frames() -> None:
    folder = resources.files("ds_doctor.knowledge") / "data"
    assert sorted(p.name for p in folder.iterdir() if p.name.endswith(".toml")) == sorted(
        [*(f"{n}.toml" for n in LIBRARIES), "measured.toml", "frames.toml"]
    )
    assert [p.name for p in data_files()] == [f"{n}.toml" for n in LIBRARIES]


def test_every_shipped_entry_loads_into_the_catalog() -> None:
    assert len(SHIPPED) >= 200 and SHIPPED == catalog.ISSUES
    assert all(isinstance(issue, KnownIssue) and isinstance(issue.patterns, tuple) for issue in SHIPPED)


@pytest.mark.parametrize("issue", SHIPPED, ids=lambda issue: issue.id)
def test_every_shipped_entry_checks_out(issue: KnownIssue) -> None:
    """Checked here by hand, not through the loader: a loader that checked nothing would still fail this."""
    for pattern in issue.patterns + issue.requires:
        re.compile(pattern, REGEX_FLAGS)
    assert issue.refs
    for ref in issue.refs:
        parts = urlsplit(ref)
        assert parts.scheme in ("http", "https") and parts.netloc and not re.search(r"\s", ref), ref
    SpecifierSet(issue.affected)
    if issue.fixed_in is not None:
        fixed = Version(issue.fixed_in)
        assert not issue.affected or not SpecifierSet(issue.affected).contains(fixed, prereleases=True)


def test_regex_backslashes_stay_as_written() -> None:
    s2 = catalog.get("ds_z3_offload_gradnorm_device_mismatch")
    assert s2.patterns[0].endswith(r"(cuda|xpu|npu|hpu)(:\d+)? and cpu")
    assert catalog.get("prodigy_group_tensors_left_on_cpu").requires == (
        r"prodigyplus[/\\]|prodigy_plus_schedule_free",
    )


def test_the_package_ships_the_data_and_its_reader() -> None:
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert "data/*.toml" in setup["options.package_data"]["ds_doctor.knowledge"]
    assert 'tomli>=2; python_version<"3.11"' in setup["options"]["install_requires"]


def test_importing_the_catalog_reads_nothing_yet() -> None:
    code = (
        "import sys, ds_doctor.knowledge.catalog as c; print('ds_doctor.knowledge.load' in sys.modules, "
        "len(c.ISSUES))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (
        proc.returncode == 0 and proc.stdout.split()[0] == "False" and int(proc.stdout.split()[1]) >= 200
    ), proc.stderr[-2000:]


# -- planted entries ------------------------------------------------------------------------------------------------

GOOD: dict[str, object] = {
    "id": "planted_issue",
    "title": "A planted issue",
    "package": "deepspeed",
    "patterns": [r"planted error \d+ on (cuda|cpu)"],
    "requires": [r"stage3\.py"],
    "cause": "a test wrote it",
    "remedy": "none needed",
    "refs": ["https://github.com/deepspeedai/DeepSpeed/issues/1"],
    "affected": ">=0.14.1,<0.14.3",
    "fixed_in": "0.14.3",
    "families": ["zero_offload"],
    "invariants": ["clip_norm_device"],
}


def toml_value(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, str):
        assert "'" not in value and "\n" not in value
        return f"'{value}'"
    return str(value)


def entry(**changes: object) -> str:
    """One [[issue]] table: GOOD with `changes` applied (a value of None drops the key)."""
    fields = {**GOOD, **changes}
    return "[[issue]]\n" + "".join(
        f"{key} = {toml_value(value)}\n" for key, value in fields.items() if value is not None
    )


def plant(tmp_path: Path, *entries: str, name: str = "planted.toml", head: str = "format = 1\n") -> Path:
    path = tmp_path / name
    path.write_text(head + "\n" + "\n".join(entries), encoding="utf-8")
    return path


def refused(path: Path) -> str:
    with pytest.raises(CatalogError) as error:
        load_file(path)
    return str(error.value)


def test_a_good_planted_entry_loads(tmp_path: Path) -> None:
    """The harness below writes valid TOML: what the cases refuse is the one change each makes."""
    (issue,) = load_file(plant(tmp_path, entry()))
    assert issue == KnownIssue(
        id="planted_issue",
        title="A planted issue",
        package="deepspeed",
        patterns=(r"planted error \d+ on (cuda|cpu)",),
        requires=(r"stage3\.py",),
        cause="a test wrote it",
        remedy="none needed",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/1",),
        affected=">=0.14.1,<0.14.3",
        fixed_in="0.14.3",
        families=("zero_offload",),
        invariants=("clip_norm_device",),
    )
    assert issue.matches("stage3.py ... planted error 7 on cuda")
    (bare,) = load_file(plant(tmp_path, entry(requires=None, affected=None, fixed_in=None, families=None)))
    assert (bare.requires, bare.affected, bare.fixed_in, bare.families) == ((), "", None, ())
    (silent,) = load_file(plant(tmp_path, entry(patterns=None, requires=None, silent="nothing raises")))
    assert silent.patterns == () and silent.silent == "nothing raises"


def test_an_entry_alongside_another_release_is_affected_only_beside_it(tmp_path: Path) -> None:
    """`alongside`: the range holds only where the other distribution's release lies in its own range; where that
    release is not known, no verdict."""
    from ds_doctor.knowledge.issues import Verdict

    (issue,) = load_file(plant(tmp_path, entry(alongside=["accelerate>=1.7.0,<1.15.0"])))
    assert issue.packages() == ("deepspeed", "accelerate")
    assert issue.version_verdict({"deepspeed": "0.14.2", "accelerate": "1.14.0"}) is Verdict.AFFECTED
    assert issue.version_verdict({"deepspeed": "0.14.2", "accelerate": "1.15.0"}) is Verdict.NOT_AFFECTED
    assert issue.version_verdict({"deepspeed": "0.14.3", "accelerate": "1.14.0"}) is Verdict.NOT_AFFECTED
    assert issue.version_verdict({"deepspeed": "0.14.2"}) is Verdict.UNKNOWN
    assert issue.to_ref(Verdict.AFFECTED).affected_versions.endswith(", with accelerate>=1.7.0,<1.15.0")


BAD = [
    pytest.param({"wordings": "planted error 1"}, "unknown key(s) wordings", id="unknown-key"),
    pytest.param(
        {"wording": "planted error 1"}, "wording must be an array of tables", id="wording-not-tables"
    ),
    pytest.param({"remedies": "typo"}, "unknown key(s) remedies", id="misspelt-key"),
    pytest.param(
        {"patterns": ["planted (error"]}, "patterns regex 'planted (error' does not compile", id="bad-pattern"
    ),
    pytest.param(
        {"requires": ["stage3[.py"]}, "requires regex 'stage3[.py' does not compile", id="bad-requires"
    ),
    pytest.param(
        {"refs": ["github.com/deepspeedai/DeepSpeed/issues/1"]}, "is not an http(s) URL", id="ref-no-scheme"
    ),
    pytest.param(
        {"refs": ["ftp://example.org/notes"]},
        "ref 'ftp://example.org/notes' is not an http(s) URL",
        id="ref-ftp",
    ),
    pytest.param({"refs": ["see issue 1"]}, "ref 'see issue 1' is not an http(s) URL", id="ref-prose"),
    pytest.param({"refs": []}, "refs is empty", id="no-refs"),
    pytest.param(
        {"affected": ">=0.14.1,<<0.14.3"},
        "affected '>=0.14.1,<<0.14.3' is not a PEP 440 specifier",
        id="bad-specifier",
    ),
    pytest.param({"affected": "0.14.2"}, "is not a PEP 440 specifier", id="version-as-specifier"),
    pytest.param({"fixed_in": "soon"}, "fixed_in 'soon' is not a PEP 440 version", id="bad-fixed-in"),
    pytest.param({"fixed_in": "0.14.2"}, "fixed_in 0.14.2 lies inside affected", id="fixed-in-affected"),
    pytest.param(
        {"alongside": ["transformers 5"]},
        "alongside 'transformers 5' is not a requirement",
        id="bad-alongside",
    ),
    pytest.param(
        {"alongside": ["transformers"]}, "must be another distribution with a range", id="alongside-no-range"
    ),
    pytest.param(
        {"alongside": ["deepspeed<1"]}, "must be another distribution with a range", id="alongside-itself"
    ),
    pytest.param({"remedy": None}, "missing required key(s) remedy", id="missing-remedy"),
    pytest.param({"refs": None}, "missing required key(s) refs", id="missing-refs"),
    pytest.param(
        {"patterns": "planted error"}, "patterns must be a list of non-empty strings", id="pattern-not-list"
    ),
    pytest.param(
        {"families": ["zero_offload", 3]}, "families must be a list of non-empty strings", id="list-of-int"
    ),
    pytest.param({"patterns": [""]}, "patterns must be a list of non-empty strings", id="empty-pattern"),
    pytest.param({"title": 3}, "title must be a string, not int", id="title-not-str"),
    pytest.param({"cause": ""}, "cause is empty", id="empty-cause"),
    pytest.param(
        {"silent": "nothing raises"}, "patterns (the error text it shows) or silent", id="patterns-and-silent"
    ),
    pytest.param(
        {"patterns": None, "requires": None}, "patterns (the error text it shows) or silent", id="neither"
    ),
    pytest.param(
        {"patterns": None, "requires": None, "silent": "quiet", "invariants": None},
        "must name the invariants",
        id="silent-without-invariants",
    ),
    pytest.param(
        {"patterns": None, "silent": "quiet"},
        "requires, banners, paraphrases and native frames go with patterns",
        id="requires-without-patterns",
    ),
    pytest.param(
        {"knobs": ["schedule=cosine"]}, "knobs are a silent issue's conditions", id="knobs-on-an-error"
    ),
    pytest.param(
        {
            "patterns": None,
            "requires": None,
            "silent": "quiet",
            "invariants": ["equivalence"],
            "knobs": ["cosine"],
        },
        "knob condition 'cosine' is not name=value",
        id="knob-without-a-name",
    ),
]


@pytest.mark.parametrize(("changes", "message"), BAD)
def test_a_bad_entry_is_refused_naming_the_file_and_the_entry(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    path = plant(tmp_path, entry(id="first_fine"), entry(**changes))
    error = refused(path)
    assert error.startswith(f"{path}: issue 'planted_issue': ") and message in error, error


def test_a_bad_id_is_named(tmp_path: Path) -> None:
    error = refused(plant(tmp_path, entry(id="Planted-Issue")))
    assert "issue 'Planted-Issue': id must match" in error
    assert "issue #2 (no id): missing required key(s) id" in refused(
        plant(tmp_path, entry(id="ok"), entry(id=None))
    )


def test_an_id_used_twice_is_refused(tmp_path: Path) -> None:
    assert "issue 'planted_issue': id used twice in this file" in refused(plant(tmp_path, entry(), entry()))
    first = plant(tmp_path, entry(), name="first.toml")
    second = plant(tmp_path, entry(id="other"), entry(), name="second.toml")
    assert [i.id for i in load_catalog([first])] == ["planted_issue"]
    with pytest.raises(CatalogError) as error:
        load_catalog([first, second])
    assert str(error.value) == f"{second}: issue 'planted_issue': id already used in {first}"


@pytest.mark.parametrize(
    ("head", "message"),
    [
        ("", "format None; this ds-doctor reads format = 1"),
        ("format = 2\n", "format 2; this ds-doctor reads format = 1"),
        ("format = 1\nissues = 3\n", "unknown top-level key(s) issues"),
        ("format = 1\npatterns = ['x\n", "not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_naming_it(tmp_path: Path, head: str, message: str) -> None:
    path = plant(tmp_path, entry(), head=head)
    error = refused(path)
    assert error.startswith(f"{path}: ") and message in error, error


def test_a_table_planned_for_later_is_refused_until_the_loader_reads_it(tmp_path: Path) -> None:
    """[[issue.measured]] is named in the schema as room for what comes next; until it is read, it is refused."""
    measured = "[[issue.measured]]\nversion = '0.14.2'\noutcome = 'reproduced'\n"
    error = refused(plant(tmp_path, entry() + measured))
    assert "issue 'planted_issue': unknown key(s) measured" in error


WORDING = (
    "[[issue.wording]]\ntext = 'planted error 3 on cuda'\nsource = 'deepspeed deepspeed/x.py'\n"
    "versions = '>=0.14.1'\nread = ['0.14.2', '0.19.8']\n"
)


def test_a_wording_table_loads_with_the_entry(tmp_path: Path) -> None:
    from ds_doctor.knowledge.issues import Wording

    (issue,) = load_file(plant(tmp_path, entry() + WORDING + WORDING.replace("3 on cuda", "4 on cpu")))
    assert issue.wordings == (
        Wording("planted error 3 on cuda", "deepspeed deepspeed/x.py", ">=0.14.1", ("0.14.2", "0.19.8")),
        Wording("planted error 4 on cpu", "deepspeed deepspeed/x.py", ">=0.14.1", ("0.14.2", "0.19.8")),
    )
    assert issue.wordings[0].package == "deepspeed"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("read = ['0.14.2', '0.19.8']", "read = ['0.14.0']"),
            "read 0.14.0 lies outside versions '>=0.14.1'",
        ),
        (("read = ['0.14.2', '0.19.8']", "read = []"), "read must list the releases whose source was read"),
        (("read = ['0.14.2', '0.19.8']", "read = ['soon']"), "Invalid version"),
        (("versions = '>=0.14.1'", "versions = '0.14'"), "Invalid specifier"),
        (
            ("source = 'deepspeed deepspeed/x.py'", "source = 'deepspeed/x.py'"),
            "must be '<distribution> <file in it>'",
        ),
        (
            ("text = 'planted error 3 on cuda'", "text = ''"),
            "text, source and versions must be non-empty strings",
        ),
        (("text = 'planted error 3 on cuda'\n", ""), "keys read, source, versions; a wording has exactly"),
        (("read = ['0.14.2', '0.19.8']", "read = ['0.14.2']\nseen = 'x'"), "a wording has exactly"),
    ],
)
def test_a_bad_wording_is_refused_naming_the_entry(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    error = refused(plant(tmp_path, entry() + WORDING.replace(*change)))
    assert (
        error.startswith(f"{tmp_path / 'planted.toml'}: issue 'planted_issue': wording #1: ")
        and message in error
    ), error


def test_a_silent_entry_has_no_wording(tmp_path: Path) -> None:
    error = refused(plant(tmp_path, entry(patterns=None, requires=None, silent="nothing raises") + WORDING))
    assert "a silent issue prints no message, so it has no wording" in error


def test_every_entry_is_judged_on_a_version_the_environment_records() -> None:
    """A verdict reads the installed version of the entry's package from the report's environment (NCCL's from the
    torch build, ds_doctor.hardware.env.nccl_version): a package the environment never records is never judged."""
    from ds_doctor.hardware.env import PACKAGES

    assert {issue.package for issue in catalog.ISSUES} - set(PACKAGES) == {"nccl"}

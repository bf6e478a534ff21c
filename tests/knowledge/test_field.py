"""The entries the catalog grew by issue 48's protocol (docs/triage.md, "Breadth by a protocol"): each has the wordings
read from its library's releases, a look-alike another cause prints, on which it must not be named, and, where a CPU
can make it happen, a reproduction whose real output triage names it on (tests/resources/repro/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds_doctor.knowledge import catalog
from ds_doctor.knowledge.load import data_files, load_file
from ds_doctor.knowledge.triage import triage

FIELD = ("field_deepspeed", "field_hf", "field_trainers", "field_distributed", "everyday")
REPRO = Path(__file__).resolve().parents[1] / "resources" / "repro"


def field_entries() -> list[catalog.KnownIssue]:
    return [issue for path in data_files() if path.name[:-5] in FIELD for issue in load_file(path)]


def reproduced() -> list[tuple[str, str]]:
    """(entry, what its reproduction printed) from tests/resources/repro/*.txt."""
    pairs = []
    for path in sorted(REPRO.glob("*.txt")):
        text = "\n".join(line for line in path.read_text().splitlines() if line[:1] != "#")
        for block in text.split("\n\n"):
            if block.strip():
                entry, error = block.strip().split("\n", 1)
                pairs.append((entry.strip(), "\n".join(line.strip() for line in error.splitlines())))
    return pairs


LOOKALIKES = [
    pytest.param(issue, n, id=f"{issue.id}-{n}")
    for issue in catalog.ISSUES
    for n in range(len(issue.lookalikes))
]


@pytest.mark.parametrize(("issue", "n"), LOOKALIKES)
def test_an_entry_is_not_named_on_its_look_alike(issue: catalog.KnownIssue, n: int) -> None:
    lookalike = issue.lookalikes[n]
    named = {m.issue.id for m in triage(lookalike.text, {})}
    assert issue.id not in named, lookalike.why


def test_every_field_entry_has_its_wordings_and_a_look_alike() -> None:
    entries = field_entries()
    assert entries, "no entries in the field data files"
    bare = [e.id for e in entries if e.patterns and not (e.wordings and e.lookalikes)]
    assert bare == []


@pytest.mark.parametrize(("entry", "error"), reproduced())
def test_each_reproduction_is_named_as_its_entry(entry: str, error: str) -> None:
    issue = catalog.get(entry)
    assert (REPRO / f"{entry}.py").is_file()
    named = {m.issue.id: m for m in triage(error, {})}
    assert entry in named
    assert named[entry].strength != "possibly" or issue.confirm

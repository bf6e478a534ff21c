"""`fleet DIR` over a shared reports folder: a `ds-doctor-*.json` there that is a link another user owns was followed,
so a report only the reader could read (another host, a private failure reason) was shown in the fleet's table and
in its `--out`. Such a link is now left out in one warning line, found by the walk or turned into one before its
read; a link of the reader's own, and a file named on the command line, are read as before. The other user's link
needs root (to give the link away), as the attack did."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ds_doctor.cli import main
from ds_doctor.cli_fleet import read_group
from tests.reports.fleet_samples import node, write_nightly

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="giving a link to another user needs root")


def planted(tmp_path: Path, owner: int) -> tuple[Path, Path]:
    """(the shared folder, holding node1's report and a link to SECRETHOST's private one, owned by `owner`)."""
    shared = tmp_path / "shared"
    write_nightly(shared, node("node1"))
    private = write_nightly(tmp_path / "private", node("SECRETHOST"))
    link = shared / "ds-doctor-link.json"
    link.symlink_to(private)
    os.lchown(link, owner, owner)
    return shared, link


def fleet(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[list[str], str]:
    assert main(["fleet", *map(str, args), "--json"]) == 0
    out, err = capsys.readouterr()
    return sorted(n["host"] for n in json.loads(out)["nodes"]), err


def test_another_users_link_in_the_folder_is_not_followed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Was: SECRETHOST in the fleet."""
    shared, link = planted(tmp_path, NOBODY)
    hosts, err = fleet(capsys, shared)
    assert hosts == ["node1"]
    assert err == f"ds-doctor: warning: {link}: a link owned by another user (uid {NOBODY}): not followed\n"


def test_a_link_that_turns_foreign_after_the_walk_is_not_read(tmp_path: Path) -> None:
    _, link = planted(tmp_path, NOBODY)
    done = read_group([link])
    assert done.facts == [] and [u.reason for u in done.unreadable] == [
        f"a link owned by another user (uid {NOBODY}): not followed"
    ]


def test_own_links_and_named_files_are_followed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    shared, link = planted(tmp_path, os.geteuid())
    assert fleet(capsys, shared) == (["SECRETHOST", "node1"], "")
    os.lchown(link, NOBODY, NOBODY)
    assert fleet(capsys, link) == (["SECRETHOST"], "")  # the user named it: read where it leads

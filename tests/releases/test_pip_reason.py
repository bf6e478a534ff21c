"""`--with PKG==VER` for a release that does not exist: the one line carries pip's own reason (the versions it
found), not the notice about yanked versions pip prints first. Real pip, offline: a find-links page that lists a
yanked release (PEP 592's `data-yanked`), as PyPI lists DeepSpeed's."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds_doctor.releases.overlay import OverlayError, Release, pip_reason, resolve, shorter_versions

#: what pip 26.3 printed here for `deepspeed==9.9.9` against a page listing 0.14.0, 0.14.1 (yanked) and 0.14.2
PIP_SAID = """Looking in links: /tmp/idx/simple/deepspeed/index.html
ERROR: Ignored the following yanked versions: 0.14.1
ERROR: Could not find a version that satisfies the requirement deepspeed==9.9.9 (from versions: 0.14.0, 0.14.2)
ERROR: No matching distribution found for deepspeed==9.9.9
"""


def test_the_reason_is_the_not_found_line_not_the_yanked_notice() -> None:
    assert pip_reason(PIP_SAID) == (
        "Could not find a version that satisfies the requirement deepspeed==9.9.9 (from versions: 0.14.0, 0.14.2)"
    )
    other_python = (
        "ERROR: Ignored the following versions that require a different python version: 1.0 Requires-Python >=3.12\n"
        "ERROR: No matching distribution found for pkg==1.0\n"
    )
    assert pip_reason(other_python) == "No matching distribution found for pkg==1.0"
    assert pip_reason("ERROR: Ignored the following yanked versions: 0.1\n") == (
        "Ignored the following yanked versions: 0.1"  # nothing else said: the notice is better than nothing
    )


def test_a_long_list_of_versions_is_cut_to_its_ends() -> None:
    versions = ", ".join(f"0.{minor}.0" for minor in range(20))
    line = f"Could not find a version that satisfies the requirement deepspeed==9 (from versions: {versions})"
    assert shorter_versions(line) == (
        "Could not find a version that satisfies the requirement deepspeed==9 "
        "(from versions: 0.0.0, 0.1.0, 0.2.0 … 0.17.0, 0.18.0, 0.19.0; 20 in all)"
    )
    assert shorter_versions("(from versions: none)") == "(from versions: none)"


def test_real_pip_on_a_page_with_a_yanked_release_says_why(tmp_path: Path) -> None:
    page = tmp_path / "index.html"
    page.write_text(
        "<!DOCTYPE html><html><body>\n"
        '<a href="deepspeed-0.14.0.tar.gz">deepspeed-0.14.0.tar.gz</a>\n'
        '<a href="deepspeed-0.14.1.tar.gz" data-yanked="broken build">deepspeed-0.14.1.tar.gz</a>\n'
        '<a href="deepspeed-0.14.2.tar.gz">deepspeed-0.14.2.tar.gz</a>\n'
        "</body></html>\n"
    )
    with pytest.raises(OverlayError) as raised:
        resolve((Release("deepspeed", "9.9.9"),), page)
    said = raised.value.message
    assert said == (
        "--with deepspeed==9.9.9: pip cannot install it: Could not find a version that satisfies the requirement "
        "deepspeed==9.9.9 (from versions: 0.14.0, 0.14.2)"
    ), said
    assert "yanked" not in said

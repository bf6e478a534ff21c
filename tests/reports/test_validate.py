"""Reading reports fast, and no less safely: the schema compiled to Python (fastjsonschema) gives `jsonschema`'s
verdict on every mutation of a real report's every field; a summary read drops the device maps and each rank's
stacks unchecked, and checks and scrubs the rest."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from ds_doctor.reports.model import SCHEMA_VERSION, load_schema, validate
from ds_doctor.run.recover import InputError, load_report_file
from tests.reports.fleet_samples import node, with_shared_gpu
from tests.reports.samples import a_failed_case

REPLACEMENTS: tuple[Any, ...] = (None, True, 0, -1, 1.0, 1.5, "x", "", [], {}, [1], {"a": 1})


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into `value` (each list's first two items)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*prefix, key)
            yield from paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:2]):
            yield (*prefix, index)
            yield from paths(inner, (*prefix, index))


def mutated(data: dict, path: tuple[Any, ...], value: Any) -> dict:
    copied = copy.deepcopy(data)
    holder = copied
    for step in path[:-1]:
        holder = holder[step]
    if value is KeyError:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    return copied


def verdict(check: Any, data: dict) -> bool:
    try:
        check(data)
    except jsonschema.ValidationError:
        return False
    return True


def test_the_compiled_schema_and_jsonschema_agree_on_every_mutation() -> None:
    report = node("node-a", results=(a_failed_case(), with_shared_gpu(a_failed_case())))
    data = json.loads(report.to_json())
    reference = jsonschema.validators.validator_for(load_schema(SCHEMA_VERSION))(load_schema(SCHEMA_VERSION))
    checked = disagreements = 0
    rejected = 0
    for path in paths(data):
        for value in (*REPLACEMENTS, KeyError):
            candidate = mutated(data, path, value)
            expected = reference.is_valid(candidate)
            checked += 1
            rejected += not expected
            if verdict(validate, candidate) != expected:
                disagreements += 1
    assert checked > 1_500 and rejected > checked // 3, (checked, rejected)  # everywhere; many invalid
    assert disagreements == 0


def test_a_summary_read_drops_the_bulk_and_checks_and_scrubs_the_rest(tmp_path: Path) -> None:
    report = node("node-a", results=(a_failed_case(),))
    data = json.loads(report.to_json())
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    result = data["results"][-1]
    result["reason"] = f"GITHUB_TOKEN={token}"
    # nested past the bound, in a part no summary reader reads: not read, so no error
    deep: Any = []
    for _ in range(200):
        deep = [deep]
    result["ranks"] = [{"rank": 0, "outcome": "pass", "stacks": deep}]
    path = tmp_path / "ds-doctor-node-a-20261121T120000Z.json"
    path.write_text(json.dumps(data))
    summary = load_report_file(path, summary=True)
    assert token not in summary.to_json() and summary.results[-1].device_map == ()
    assert summary.results[-1].reason and "GITHUB_TOKEN=" in summary.results[-1].reason
    with pytest.raises(InputError, match="nested more than"):
        load_report_file(path)  # the whole report is read: every part is bounded
    result["outcome"] = "exploded"  # what a summary reads is still checked
    result["ranks"] = []
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="not a valid ds-doctor report at results/"):
        load_report_file(path, summary=True)

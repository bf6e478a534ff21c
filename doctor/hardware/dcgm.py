"""DCGM's quick diagnostic, `dcgmi diag -r 1 -j` where dcgmi is on PATH, as a `DcgmRecord`.

The JSON is NVIDIA/DCGM dcgmi/Diag.cpp's (HelperJsonBuildOutput; keys nvvs/include/NvvsJsonStrings.h). dcgmi's
answer is read as data from anywhere: no JSON, JSON of another shape, an error, a flood or a hang each make the
record `unavailable` with the reason (the `node_records[dcgm]` result then skips), and an entry of a wrong shape
inside it is left out.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ds_doctor.hardware.bounded import MESSAGE_CHARS, NOT_LINUX, Runner, on_linux, run_bounded
from ds_doctor.reports.noderecords import DcgmRecord, DcgmTest, SourceState

DCGM_SECONDS = 120.0
DCGM_BYTES = 4 << 20
MAX_DCGM_RESULTS = 256
DCGM_COMMAND = ("diag", "-r", "1", "-j")
COMMAND = "dcgmi " + " ".join(DCGM_COMMAND)
#: `DCGM Diagnostic` since DCGM 4 (NvvsJsonStrings.h NVVS_NAME); `DCGM GPU Diagnostic` before it.
DCGM_ROOTS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")
STATUSES = {"pass": "Pass", "fail": "Fail", "warn": "Warn", "skip": "Skip", "not run": "Not Run"}


def _json_object(text: str) -> Any:
    """The JSON object in a command's output (dcgmi may print a line before it), or None."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        return json.loads(text[start : end + 1])
    except (ValueError, RecursionError):
        return None


def _objects(value: object) -> list[Mapping[str, Any]]:
    """The objects of a JSON list (none where it is no list)."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _label(value: object) -> str:
    """A name DCGM gives (a category, a test): its text where it is a scalar."""
    return str(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else ""


def _entity(result: Mapping[str, Any]) -> str | None:
    """`GPU 0` (DCGM 4: entity_group and entity_id), `GPU 0,1` (DCGM 3: gpu_ids), None (a test's summary)."""
    if "entity_id" in result:
        return f"{(_label(result.get('entity_group')) or 'GPU')[:16]} {_label(result['entity_id'])[:16]}"
    if "gpu_ids" in result:
        return f"GPU {_label(result['gpu_ids'])[:64]}"
    return None


def _texts(values: object, key: str | None = None) -> tuple[str, ...]:
    if not isinstance(values, list):
        return ()
    out = []
    for value in values[:16]:
        text = value.get(key) if key and isinstance(value, Mapping) else value
        if isinstance(text, str):
            out.append(text[:MESSAGE_CHARS])
    return tuple(out)


def _dcgm_result(category: str, test: str, result: Mapping[str, Any]) -> DcgmTest:
    status = _label(result.get("status"))
    warnings = result.get("warnings")
    ids = [w.get("error_id") for w in _objects(warnings)[:16]]
    return DcgmTest(
        category=category[:64],
        test=test[:64],
        entity=_entity(result),
        status=STATUSES.get(status.strip().lower(), status[:16]),
        warnings=_texts(warnings, "warning"),
        error_ids=tuple(i for i in ids if isinstance(i, int) and not isinstance(i, bool)),
        info=_texts(result.get("info")),
    )


def _dcgm_tests(categories: list[Mapping[str, Any]]) -> Iterator[DcgmTest]:
    for category in categories:
        for test in _objects(category.get("tests")):
            summary = test.get("test_summary")
            results = _objects(test.get("results")) or ([summary] if isinstance(summary, Mapping) else [])
            for result in results:
                yield _dcgm_result(_label(category.get("category")), _label(test.get("name")), result)


def _version(data: Mapping[str, Any], root: Mapping[str, Any]) -> str | None:
    metadata = data.get("metadata")
    version = (metadata.get("version") if isinstance(metadata, Mapping) else None) or root.get("version")
    return _label(version)[:32] or None


def parse_dcgm(data: object) -> DcgmRecord:
    """A record from `dcgmi diag -j`'s JSON: each test's result per entity (at most MAX_DCGM_RESULTS)."""
    if not isinstance(data, Mapping):
        return DcgmRecord(SourceState.UNAVAILABLE, "dcgmi diag printed no JSON object")
    root = next((data[key] for key in DCGM_ROOTS if isinstance(data.get(key), Mapping)), None)
    if root is None:
        return DcgmRecord(SourceState.UNAVAILABLE, f"dcgmi diag's JSON has none of {', '.join(DCGM_ROOTS)}")
    if root.get("runtime_error"):
        return DcgmRecord(
            SourceState.UNAVAILABLE, f"dcgmi diag: {_label(root['runtime_error'])[:MESSAGE_CHARS]}"
        )
    if not isinstance(root.get("test_categories"), list):
        return DcgmRecord(
            SourceState.UNAVAILABLE,
            "dcgmi diag's JSON has no list of test_categories (a shape not known here)",
        )
    tests: list[DcgmTest] = []
    for entry in _dcgm_tests(_objects(root["test_categories"])):
        if len(tests) >= MAX_DCGM_RESULTS:
            break
        tests.append(entry)
    return DcgmRecord(SourceState.READ, version=_version(data, root), tests=tuple(tests))


def read_dcgm(
    runner: Runner = run_bounded,
    which: Callable[[str], str | None] = shutil.which,
    *,
    timeout_s: float = DCGM_SECONDS,
    max_bytes: int = DCGM_BYTES,
) -> DcgmRecord:
    """DCGM's level-1 diagnostic (`dcgmi diag -r 1 -j`: deployment checks, seconds) where dcgmi is on PATH."""
    if not on_linux():
        return DcgmRecord(SourceState.UNAVAILABLE, NOT_LINUX)
    dcgmi = which("dcgmi")
    if dcgmi is None:
        return DcgmRecord(SourceState.ABSENT, "dcgmi is not on PATH")
    out = runner((dcgmi, *DCGM_COMMAND), timeout_s, max_bytes)
    if out.error:
        return DcgmRecord(SourceState.UNAVAILABLE, f"{COMMAND}: {out.error}")
    if out.timed_out:
        return DcgmRecord(SourceState.UNAVAILABLE, f"{COMMAND} did not finish in {timeout_s:g} s")
    if out.truncated:
        return DcgmRecord(SourceState.UNAVAILABLE, f"{COMMAND} printed more than {max_bytes} bytes")
    text = out.stdout.decode("utf-8", "replace")
    data = _json_object(text)
    if data is None:
        said = text.strip().splitlines()
        why = said[0][:MESSAGE_CHARS] if said else out.reason()
        return DcgmRecord(SourceState.UNAVAILABLE, f"{COMMAND} printed no JSON: {why}")
    return dataclasses.replace(parse_dcgm(data), returncode=out.returncode, answered=True)

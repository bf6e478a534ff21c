"""The node's own fault records, read as the kernel and NVIDIA's tools leave them: Xid errors in the kernel log,
PCIe AER counters and InfiniBand ports in sysfs, and DCGM's quick diagnostic (`dcgmi diag -r 1`).

One reader per source (`ds_doctor.hardware.xid`, `.aer`, `.ib`, `.dcgm`), each over the one bounded-read helper
(`ds_doctor.hardware.bounded`: a file at most so many bytes and never waited on, a command at most so many bytes
and seconds) and each returning its typed record (`ds_doctor.reports.noderecords`); this module builds them into
`NodeRecords`. A record's `state` says what its reader got: `read` (the data beside it), `absent` (the source does
not exist on this node: no NVIDIA driver, no RDMA device, no dcgmi; `reason` says which) or `unavailable` (it
exists but could not be read: no permission, a command that failed, hung or answered in a shape it never has, not
Linux; `reason` says why). No reader's failure is the run's: whatever one raises makes its record `unavailable`.
The readers take a root folder (a fake sysfs tree in the tests) and a command runner the tests replace. The rules
over these records are in `ds_doctor.checks.noderecords`; tests/resources/noderecords/README.md cites each
source's format.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any, TypeVar

from ds_doctor.hardware.aer import parse_aer, read_aer
from ds_doctor.hardware.bounded import CommandOutput, Runner, read_text, reason, run_bounded
from ds_doctor.hardware.dcgm import parse_dcgm, read_dcgm
from ds_doctor.hardware.ib import read_ib
from ds_doctor.hardware.xid import driver_gpus, parse_xid_log, pci_key, read_xids
from ds_doctor.reports.noderecords import (
    AerRecord,
    DcgmRecord,
    IbRecord,
    NodeRecords,
    SourceRecord,
    SourceState,
    XidRecord,
)

__all__ = [
    "CommandOutput",
    "NodeRecords",
    "Runner",
    "build_node_records",
    "driver_gpus",
    "parse_aer",
    "parse_dcgm",
    "parse_xid_log",
    "pci_key",
    "read_aer",
    "read_dcgm",
    "read_ib",
    "read_node_records",
    "read_text",
    "read_xids",
    "run_bounded",
]

R = TypeVar("R", bound=SourceRecord)


def _guarded(kind: type[R], name: str, read: Callable[[], R]) -> R:
    """One reader's record; where the reader raises (a shape of its source no test foresaw), an `unavailable`
    record saying so, so that the run goes on to its report."""
    try:
        return read()
    except Exception as exc:
        return kind(SourceState.UNAVAILABLE, f"the {name} reader failed: {reason(exc)}"[:600])


def build_node_records(
    root: str | os.PathLike[str] = "/",
    runner: Runner = run_bounded,
    which: Callable[[str], str | None] = shutil.which,
    *,
    dcgm: bool = True,
) -> NodeRecords:
    """Every source's record (DCGM's `absent` when not asked for: it takes seconds and starts DCGM's own checks)."""
    return NodeRecords(
        xid=_guarded(XidRecord, "kernel log (Xid)", lambda: read_xids(root, runner)),
        aer=_guarded(AerRecord, "PCIe AER", lambda: read_aer(root)),
        ib=_guarded(IbRecord, "InfiniBand", lambda: read_ib(root)),
        dcgm=_guarded(DcgmRecord, "DCGM", lambda: read_dcgm(runner, which))
        if dcgm
        else DcgmRecord(SourceState.ABSENT, "not run (dcgm=False)"),
    )


def read_node_records(
    root: str | os.PathLike[str] = "/",
    runner: Runner = run_bounded,
    which: Callable[[str], str | None] = shutil.which,
    *,
    dcgm: bool = True,
) -> dict[str, Any]:
    """{"xid", "aer", "ib", "dcgm"} as the hardware section carries them (the schema's `node_records`)."""
    return build_node_records(root, runner, which, dcgm=dcgm).to_dict()

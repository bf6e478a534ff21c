"""The CPU facts DeepSpeed asks py-cpuinfo for, computed once per run and handed to every rank.

DeepSpeed's op builders (`cpu_arch()`, `simd_width()` in op_builder/builder.py) and `DeepSpeedCPUAdam.__init__` call
`cpuinfo.get_cpu_info()` about five times per rank per launch, and each call starts a Python subprocess (~1.1 s):
about 12 s of a 33-s `run --level 2` on 2 cores (issue 38). The parent asks once per run for the JSON py-cpuinfo's own
subprocess prints (`get_cpu_info_json()`) and writes it into the run directory; each rank's `get_cpu_info_json` then
answers with that text, and `get_cpu_info()` parses it exactly as it parses its subprocess's output: the same dict,
not a copy made another way. A node computes its own (each node of a multi-node run has its own run directory).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from ds_doctor.files import write_atomic

CPUINFO_ENV = "DS_DOCTOR_CPUINFO_JSON"
FILE = "cpuinfo.json"


def computed(run_root: Path) -> Path | None:
    """The run's py-cpuinfo answer, asked once (None where py-cpuinfo is not installed or fails: the ranks then ask
    it themselves, as DeepSpeed would)."""
    path = run_root / FILE
    if path.is_file():
        return path
    try:
        import cpuinfo

        text = cpuinfo.get_cpu_info_json()
        text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
        json.loads(text)
    except Exception:  # py-cpuinfo's own failure is DeepSpeed's to meet, in the rank, as without this cache
        return None
    write_atomic(path, text, fsync=False)
    return path


def reuse(environ: Mapping[str, str] = os.environ) -> bool:
    """In a rank: py-cpuinfo answers with the run's JSON (where the parent wrote one and py-cpuinfo is installed)."""
    name = environ.get(CPUINFO_ENV)
    if not name:
        return False
    try:
        text = Path(name).read_text(encoding="utf-8")
        json.loads(text)
        import cpuinfo
        import cpuinfo.cpuinfo as module
    except (OSError, ValueError, ImportError):
        return False

    def get_cpu_info_json() -> str:
        return text

    module.get_cpu_info_json = get_cpu_info_json  # what get_cpu_info() calls, by its module's name
    cpuinfo.get_cpu_info_json = get_cpu_info_json
    return True

"""The equivalence family's reference process, forked from a rank or started afresh: never one of several."""

from __future__ import annotations

import subprocess
import sys

ASK = (
    "import os, torch, torch.distributed as dist\n"
    "os.environ.update(RANK='1', WORLD_SIZE='2', LOCAL_RANK='1', MASTER_PORT='29999')\n"
    "from ds_doctor.probes.equivalence import reference as r\n"
    "{before}\n"
    "proc = r._PROCESS.start()\n"
    "seen = r._PROCESS.ask({{'call': 'ds_doctor.probes.equivalence.reference:surroundings', 'args': ()}})\n"
    "print(type(proc).__name__, seen['process_group'], seen['variables'], dist.is_initialized())\n"
    "r._PROCESS.close()\n"
)
GROUP = "dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)"


def ask_from_a_rank(before: str = "") -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", ASK.format(before=before)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.split()


def test_a_reference_forked_before_the_process_group_sees_neither_it_nor_torchruns_variables() -> None:
    assert ask_from_a_rank() == ["Forked", "False", "[]", "False"]


def test_after_the_process_group_the_reference_is_a_process_started_afresh() -> None:
    """Forked there, the child would hold the rank's process group: it is started with `python -m` instead."""
    assert ask_from_a_rank(GROUP) == ["Popen", "False", "[]", "True"]


def test_a_torch_built_for_gpus_starts_the_reference_afresh() -> None:
    """A child forked after the rank has touched the GPU driver could not use the GPU (a user's model may)."""
    assert ask_from_a_rank("torch.version.cuda = '12.8'") == ["Popen", "False", "[]", "False"]

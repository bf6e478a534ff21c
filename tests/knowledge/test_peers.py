"""The rank that failed first, named when the rest of a log is other ranks' NCCL remote errors (its echo)."""

from __future__ import annotations

import time

from ds_doctor.knowledge.peers import first_failure, peer_findings
from ds_doctor.knowledge.triage import read_log
from ds_doctor.reports.model import Severity
from tests.bounds import GENEROUS_S

#: ranks 5 and 6 lose their peer; rank 3 ran out of memory first (the shapes of LlamaFactory #6849's log and
#: torch's own ProcessGroupNCCL lines, with the rank that died put back in)
ECHO = (
    "[rank5]:[E207 19:37:09.983600771 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 5] Process "
    "group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network "
    "error, NCCL version 2.21.5\n"
    "[rank5]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
    "prematurely.\n[rank5]: Last error:\n"
    "[rank5]: socketProgressOpt: Call to recv from 10.119.24.53<49901> failed : Broken pipe\n"
    "[rank6]: torch.distributed.DistBackendError: NCCL error: remote process exited or there was a network error\n"
)
OWN = (
    '[rank3]: Traceback (most recent call last):\n[rank3]:   File "train.py", line 88, in <module>\n'
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity "
    "of 79.11 GiB\n"
)
#: torchrun's failure summary, in torch's own template (elastic/multiprocessing/errors/__init__.py)
SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-02-07_19:37:11
  host      : worker-0
  rank      : 5 (local_rank: 5)
  exitcode  : 1 (pid: 4288)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-02-07_19:37:09
  host      : worker-0
  rank      : 7 (local_rank: 7)
  exitcode  : -9 (pid: 4290)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4290
============================================================
"""


def test_the_rank_whose_own_error_comes_first_is_named() -> None:
    first = first_failure(ECHO + OWN)
    assert (first.rank, first.source) == (3, "rank 3's own traceback") and first.what.startswith(
        "torch.OutOfMemory"
    )
    (finding,) = peer_findings(ECHO + OWN)
    assert (finding.invariant, finding.severity, finding.rank) == ("first_failed_rank", Severity.ERROR, 3)
    assert "follow from it" in finding.message


def test_torchruns_root_cause_summary_wins() -> None:
    first = first_failure(ECHO + OWN + SUMMARY)
    assert (first.rank, first.source) == (7, "torchrun's root-cause summary")
    assert first.what == "exitcode -9; Signal 9 (SIGKILL) received by PID 4290"


def test_a_log_of_echoes_only_says_the_first_rank_is_not_in_it() -> None:
    assert first_failure(ECHO) is None
    (finding,) = peer_findings(ECHO)
    assert finding.severity == Severity.WARNING and "shows no rank failing before them" in finding.message


def test_triage_names_the_first_rank_beside_the_remote_error_entry() -> None:
    reading = read_log(ECHO + OWN + SUMMARY, {})
    assert [m.issue.id for m in reading.matches] == [  # the rank that failed first ran out of GPU memory
        "nccl_remote_error_peer_exited",
        "cuda_oom",
        "torchrun_child_sigkill",
    ]
    assert [(f.invariant, f.rank) for f in reading.findings] == [("first_failed_rank", 7)]
    assert read_log(OWN, {}).findings == []  # no remote error: no echo to explain


def test_a_secret_in_the_first_error_is_scrubbed() -> None:
    own = OWN.replace(
        "CUDA out of memory.", "failed to fetch with HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789"
    )
    (finding,) = read_log(ECHO + own, {}).findings
    assert "hf_abcdefghij" not in finding.message


def test_a_huge_prefixed_log_is_read_in_bounded_time() -> None:
    start = time.monotonic()
    assert first_failure(ECHO * 20_000 + "[rank1]: " + "x" * 2_000_000) is None
    assert time.monotonic() - start < GENEROUS_S  # a regex backtracking over 2 MB: hours

"""Every wording an entry's message ever had, as the library's own releases print it ([[issue.wording]] in the data
files, each read from the releases it names), is matched by that entry's patterns and claimed by no other entry.

A pattern written from one ticket fits one release: these are the wordings that tripped triage on real tickets
(Accelerate's pre-0.26 batch-size error, torch >= 2.1's backticked `requires_grad`, torch >= 2.8's device
message). Each is also tried as a ticket shows it: its backticks gone (GitHub renders them away) and wrapped by
a terminal at 72 columns inside a traceback.
"""

from __future__ import annotations

import re
import textwrap

import pytest

from ds_doctor.knowledge import catalog
from ds_doctor.knowledge.issues import REGEX_FLAGS, KnownIssue, Wording
from ds_doctor.knowledge.matching import classify
from ds_doctor.knowledge.triage import read_log

CASES = [
    pytest.param(issue, wording, id=f"{issue.id}-{n}")
    for issue in catalog.ISSUES
    for n, wording in enumerate(issue.wordings)
]

#: entries with a signature and no wording, and why: what they match is not a message a release prints
UNREAD = {
    "ds_jit_build_stale_lock": "matches a frame (file_baton.py, wait), not a message",
    "ds_replaced_trainable_param_not_trained": "Python's own IndexError; its frames decide",
    "numpy2_pickle_read_by_numpy1": "Python's own ModuleNotFoundError, raised by pickle: no library words it",
}

#: entries that share a message on purpose (a version or the frames tell them apart)
SHARED = {
    "nccl_duplicate_gpu": {"nccl_duplicate_gpu_subgroups_before_set_device"},
    "nccl_duplicate_gpu_subgroups_before_set_device": {"nccl_duplicate_gpu"},
    # the allocator's one message, told apart by the phase its traceback's frames show (each names cuda_oom beside it)
    "cuda_oom_loading_model": {"cuda_oom"},
    "cuda_oom_forward": {"cuda_oom"},
    "cuda_oom_backward": {"cuda_oom"},
    "cuda_oom_optimizer_first_step": {"cuda_oom"},
    "cuda_oom_eval_accumulating_logits": {"cuda_oom"},
    "oom_gathering_full_state_dict_on_save": {"cuda_oom"},
    # torch's device check, told apart by the frames (ZeRO-3's unscale_and_clip_grads, prodigy's optimizer); without
    # them it is the class
    "ds_z3_offload_gradnorm_device_mismatch": {"device_mismatch_cpu_accelerator"},
    "prodigy_group_tensors_left_on_cpu": {"device_mismatch_cpu_accelerator"},
    # a keyword a remote model's code does not take, told apart by its frames; without them it is the class
    "hf_remote_code_old_gradient_checkpointing": {"python_call_keyword_mismatch"},
    # torch's shape checks of a weight: ZeRO-3's empty placeholder and FSDP's flat shard both fail them, told apart
    # by the wrapper the text names; naming neither, both as "possibly"
    "ds_z3_module_run_outside_engine": {"fsdp1_submodule_called_outside_root_forward"},
    "fsdp1_submodule_called_outside_root_forward": {"ds_z3_module_run_outside_engine"},
}


def pattern_hits(issue: KnownIssue, text: str) -> bool:
    return any(re.search(pattern, text, REGEX_FLAGS) for pattern in issue.patterns)


def as_tickets_show_it(wording: Wording) -> dict[str, str]:
    return {"as printed": wording.text, "backticks rendered away": wording.text.replace("`", "")}


@pytest.mark.parametrize(("issue", "wording"), CASES)
def test_every_wording_is_matched_by_its_entry(issue: KnownIssue, wording: Wording) -> None:
    for form, text in as_tickets_show_it(wording).items():
        assert pattern_hits(issue, text), f"{form}: {text[:200]!r}"


@pytest.mark.parametrize(("issue", "wording"), CASES)
def test_no_other_entry_claims_a_wording(issue: KnownIssue, wording: Wording) -> None:
    for text in as_tickets_show_it(wording).values():
        others = {hit.id for hit in classify(text)} - {issue.id} - SHARED.get(issue.id, set())
        assert others == set(), text[:200]


@pytest.mark.parametrize(("issue", "wording"), [case for case in CASES if not case.values[0].requires])
def test_a_wording_wrapped_by_a_terminal_is_triaged(issue: KnownIssue, wording: Wording) -> None:
    """Cut at 72 columns with a two-space indent (no fixed width the normaliser could join on): triage's flattened
    matching finds it all the same. Entries with `requires` need their frames, so they are left to test_catalog."""
    if "\n" in wording.text:
        pytest.skip("a multi-line message is already broken where its release breaks it")
    text = (
        'Traceback (most recent call last):\n  File "train.py", line 1, in <module>\nRuntimeError: '
        + textwrap.fill(wording.text, 72, subsequent_indent="  ", break_on_hyphens=False)
    )
    assert issue.id in [m.issue.id for m in read_log(text, {}).matches]


def test_the_entries_without_a_wording_are_exactly_the_listed_ones() -> None:
    """A new entry gets its wordings (or a reason here); an entry listed here that gains one leaves the list."""
    assert {i.id for i in catalog.ISSUES if i.patterns and not i.wordings} == set(UNREAD)


def test_each_wording_names_where_it_was_read() -> None:
    for issue in catalog.ISSUES:
        for wording in issue.wordings:
            assert wording.package in {
                "torch",
                "deepspeed",
                "accelerate",
                "transformers",
                "nccl",
                "mosaicml",
                "peft",
                "trl",
                "flash-attn",
                "safetensors",
                "llamafactory",
                "megatron-core",  # its gradient checks, in ms-swift's and verl's Megatron paths
                "verl",
                "python",  # CPython's own messages (an import error, faulthandler)
                "py-spy",  # a stack dump of a rank waiting in a collective
                "ms-swift",
                "datasets",
                "unsloth",
                "bitsandbytes",
                "slurm",
                "axolotl",
                "sentencepiece",
                "pyarrow",
                "ray",
                "huggingface_hub",
                "glibc",  # the dynamic loader's dlerror
                "binutils",  # the linker's
                "pdsh",  # its ssh's exit, beside OpenSSH's refusal
                "dash",  # a POSIX shell's "not found" for a tool's command
                "bash",
                "vllm",  # its weight loader, in the rollout engine of an RL trainer
                "colossalai",  # its launcher (colossalai run), which starts torchrun on each host
            }, wording.source
            assert wording.read and wording.versions, issue.id

"""Matching by structure (issue 48): a known error in another shape than its pasted line is still named, by the kind
of match that found it, said in every format; and a text that only shares a shape is not.

The texts are real: tickets' titles and excerpts as the public trackers show them (each with its thread), and what
the libraries print here.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from ds_doctor.knowledge import catalog
from ds_doctor.knowledge.matching import judged, matches
from ds_doctor.knowledge.structure import (
    LEAD_MIN,
    Frame,
    Kind,
    cut_form,
    leads,
    loose_form,
    loosened_pattern,
    raised,
)
from ds_doctor.knowledge.triage import triage
from ds_doctor.reports.triage import render_triage, render_triage_markdown
from tests.knowledge.samples import sample_text

STRUCTURE = Path(__file__).resolve().parents[1] / "resources" / "structure"


def named(text: str) -> dict[str, tuple[str, str]]:
    """What triage names on `text`: id -> (kind, strength)."""
    return {m.issue.id: (m.kind, m.strength) for m in triage(text, {})}


# --- loose: case and quotes aside ---


@pytest.mark.parametrize(
    ("pattern", "text", "hit"),
    [
        (
            "'DistributedDataParallel' object has no attribute",
            "distributeddataparallel object has no attribute",
            True,
        ),
        (r"Using the `?Trainer`? with `?PyTorch`? requires", "using the trainer with pytorch requires", True),
        (r"""no attribute ['"]ds_grads""", "No attribute ds_grads", True),
        (r"""value [^'"]+ here""", "value x here", True),
        (r"Error building extension '\w+'", "error building extension cpu_adam", True),
        ("Cannot free a ZeRO-3 parameter", "cannot free a zero-3 parameter", True),
        ("Cannot free a ZeRO-3 parameter", "cannot free a zero-2 parameter", False),
    ],
)
def test_a_loosened_pattern_takes_any_case_and_no_quotes(pattern: str, text: str, hit: bool) -> None:
    assert bool(re.search(loosened_pattern(pattern), loose_form(text))) is hit


@pytest.mark.parametrize(
    ("number", "line"),
    [
        (
            "037",
            "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
        ),  # vLLM's cumem allocator
        (
            "041",
            "cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
        ),  # ...retyped as a title
    ],
)
def test_a_real_message_in_other_capitals_is_named_loosely(number: str, line: str) -> None:
    """The first fresh sample's two loose matches: CUDA's "out of memory" error as vLLM's allocator capitalises it,
    and a title that lowers it; the entry's pattern says `CUDA error: out of memory`."""
    assert line in fresh(number)
    assert named(fresh(number))["cuda_oom"] == (Kind.LOOSE, "message only")


def test_a_message_in_other_capitals_and_without_its_quotes_is_named_loosely() -> None:
    # kohya-ss/sd-scripts#1272's error with its quotes gone and a title's capitals, as tickets retype it
    text = "Distributed Training Is Broken: AttributeError: DistributedDataParallel Object Has No Attribute text_model"
    assert named(text)["ddp_attribute_on_wrapper"][0] == Kind.LOOSE


# --- cut: the leading part of a wording, the text stopping after it ---

UNSLOTH_1629 = """ValueError: Some modules are dispatched on the CPU or the disk

When I am trying to fine tune large models in Kaggle, which are most models over 8B parameters in 4-bit precision, \
I get the following error:
"""  # https://github.com/unslothai/unsloth/issues/1629 (title and the excerpt's first line)

LAWYERGPT_6 = """Some modules are dispatched on the CPU or the disk. Make sure you have enough GPU RAM to fit

Running this section of your code during inference I am getting the below error.
"""  # https://github.com/NisaarAgharia/Indian-LawyerGPT/issues/6


def test_a_title_cut_inside_a_message_names_it_and_how_sure() -> None:
    short = named(UNSLOTH_1629)["hf_bnb_quantized_modules_offloaded"]
    long = named(LAWYERGPT_6)["hf_bnb_quantized_modules_offloaded"]
    assert short == (Kind.CUT, "possibly")  # 51 characters of a 400-character message
    assert long == (Kind.CUT, "message cut short")


@pytest.mark.parametrize(
    "text",
    [
        # the same words going on to say something else, inside the line: not a cut
        "Some modules are dispatched on the CPU or the disk because I asked for device_map='auto' on purpose",
        # shorter than the wording's distinctive part: words many messages begin with
        "Some modules are",
    ],
)
def test_a_text_that_only_begins_like_a_message_is_not_a_cut(text: str) -> None:
    assert "hf_bnb_quantized_modules_offloaded" not in named(text)


ACCELERATE_3354 = """Running TRL example doesn't work when using deepspeed on accelerate

error: initialize your accelerator via accelerator = Accelerator()
"""  # https://github.com/huggingface/accelerate/issues/3354 (title, and the message retyped from its middle)


def test_a_message_retyped_from_inside_is_possibly_its_entry_and_says_so() -> None:
    """Accelerate's "Please make sure to properly initialize your accelerator via `accelerator = Accelerator()` before
    using any functionality from the `accelerate` library." with its head and tail gone (sample 48zj's 105)."""
    assert named(ACCELERATE_3354)["acc_state_attrs_missing_version_skew"] == (Kind.CUT, "possibly")
    (match,) = [m for m in matches(ACCELERATE_3354) if m.issue.id == "acc_state_attrs_missing_version_skew"]
    assert match.confirm and "from inside its message" in match.confirm
    ranked = (
        "[rank0]: initialize your accelerator via accelerator = Accelerator()"  # a rank's label before it
    )
    assert named(ranked)["acc_state_attrs_missing_version_skew"] == (Kind.CUT, "possibly")


@pytest.mark.parametrize(
    "text",
    [
        # the run going on to say something else on its line: another sentence, not this message cut
        "error: initialize your accelerator via accelerator = Accelerator() and then the model",
        # fewer than LEAD_MIN characters from inside it
        "error: make sure to properly",
        # after other words on its line: the tail of another sentence, not this message clipped
        "I keep asking it to initialize your accelerator via accelerator = Accelerator()",
        # a line printed whole under its own type: another message sharing these words
        "UserWarning: initialize your accelerator via accelerator = Accelerator()",
    ],
)
def test_a_run_from_inside_a_message_that_goes_on_or_is_short_is_not_it(text: str) -> None:
    assert "acc_state_attrs_missing_version_skew" not in named(text)


def test_a_run_that_another_entrys_wording_also_holds_names_neither() -> None:
    """A run from inside a wording is taken only where no other entry's wording contains it."""
    from ds_doctor.knowledge.structure import clipped_hits, inner_runs

    both = inner_runs(
        [
            catalog.get("acc_state_attrs_missing_version_skew"),
            dataclasses.replace(
                catalog.get("peft_config_field_unknown_to_release"),
                id="a_copy",
                wordings=catalog.get("acc_state_attrs_missing_version_skew").wordings,
            ),
        ]
    )
    assert clipped_hits(ACCELERATE_3354, both) == {}
    alone = inner_runs([catalog.get("acc_state_attrs_missing_version_skew")])
    assert set(clipped_hits(ACCELERATE_3354, alone)) == {"acc_state_attrs_missing_version_skew"}


def test_each_leading_part_is_distinctive_in_the_catalog() -> None:
    """Measured when the catalog loads: every wording's leading part is found in no other entry's wording (but the
    very wording an entry narrowed by `requires` shares with it)."""
    found = leads(catalog.ISSUES)
    forms = {
        (issue.id, " ".join(cut_form(w.text).split())) for issue in catalog.ISSUES for w in issue.wordings
    }
    narrowed = {issue.id for issue in catalog.ISSUES if issue.requires}
    assert len(found) > len(forms) // 2
    for lead in found:
        head = lead.wording[: lead.distinct]
        own = {form for owner, form in forms if owner == lead.issue}
        assert len(head) >= LEAD_MIN
        claimed = [
            o for o, form in forms if o != lead.issue and head in form and not (o in narrowed and form in own)
        ]
        assert not claimed, lead.issue


# --- banner: what is printed before the error, without it ---

RTL_CODER_13 = (
    STRUCTURE / "rtl-coder-13.txt"
).read_text()  # https://github.com/hkust-zhiyao/RTL-Coder/issues/13 (compile flags shortened)

DEEPSPEED_6912 = (
    "[BUG] FAILED: multi_tensor_adam.cuda.o with"  # https://github.com/deepspeedai/DeepSpeed/issues/6912
)

AUTOPOISON_6 = (
    STRUCTURE / "autopoison-6.txt"
).read_text()  # https://github.com/azshue/AutoPoison/issues/6 (the excerpt stops there)


@pytest.mark.parametrize("text", [RTL_CODER_13, DEEPSPEED_6912, AUTOPOISON_6])
def test_a_failed_op_build_without_its_error_line_is_possibly_the_build_failure(text: str) -> None:
    assert named(text)["ds_jit_op_compile_failed"] == (Kind.BANNER, "possibly")


def test_a_build_that_worked_and_another_extensions_failure_are_not_a_deepspeed_build_failure() -> None:
    worked = (
        "Building extension module cpu_adam...\nAllowing ninja to set a default number of workers...\n"
        "ninja: no work to do.\nLoading extension module cpu_adam...\nTime to load cpu_adam op: 2.4 seconds"
    )
    # https://github.com/pytorch/pytorch/issues/108209: a project's own extension (setup.py), not DeepSpeed's
    other = (
        "ninja: build stopped: subcommand failed.\nTraceback (most recent call last):\n  File "
        '"/home/hhw/.conda/envs/geo/lib/python3.8/site-packages/torch/utils/cpp_extension.py", line 1533, in '
        "_run_ninja_build\n    subprocess.run(\nsubprocess.CalledProcessError: Command '['ninja', '-v']' returned "
        "non-zero exit status 1."
    )
    assert "ds_jit_op_compile_failed" not in named(worked) | named(other)


def test_with_its_error_line_the_build_failure_is_named_by_its_message() -> None:
    text = AUTOPOISON_6 + "RuntimeError: Error building extension 'cpu_adam'\n"
    assert named(text)["ds_jit_op_compile_failed"][0] == Kind.WORDING


# --- frame: the raising frame and type of an entry's check ---


def test_a_raising_frame_is_read_with_its_exception_type() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/elastic/rendezvous/'
        'c10d_rendezvous_backend.py", line 119, in _call_store\n'
        "    raise RendezvousConnectionError(\n"
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The store went away.\n"
    )
    (shown,) = raised(text)
    assert (shown.function, shown.exception.rsplit(".", 1)[-1]) == (
        "_call_store",
        "RendezvousConnectionError",
    )
    assert named(text)["torchrun_rendezvous_unreachable"] == (Kind.FRAME, "possibly")


TORCHTUNE_2676 = (STRUCTURE / "torchtune-2676.txt").read_text()
# https://github.com/meta-pytorch/torchtune/issues/2676: the excerpt, a terminal's copy (lines padded, frames broken
# at its width), stops at the raising frame's `raise`, before the exception's line (its title has the message)


def test_an_excerpt_stopping_at_the_raise_of_an_entrys_check_is_possibly_the_entry() -> None:
    (shown,) = [r for r in raised(TORCHTUNE_2676)]
    assert (shown.function, shown.exception) == ("_call_store", "RendezvousConnectionError")
    assert named(TORCHTUNE_2676)["torchrun_rendezvous_unreachable"] == (Kind.FRAME, "possibly")


def test_a_code_line_naming_an_exception_is_not_a_raised_one() -> None:
    text = (
        '  File "/x/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 119, in '
        "_call_store\n    except RendezvousConnectionError as exc:\n"
    )
    assert raised(text) == []


# --- every format says which kind it was ---


def test_every_triage_format_says_how_it_matched() -> None:
    found = triage(UNSLOTH_1629, {})
    assert (
        "by:       a distinctive part of its message, where the text is cut (its end, or its start)"
        in render_triage(found)
    )
    assert (
        "**matched by:** a distinctive part of its message, where the text is cut (its end, or its start)"
        in render_triage_markdown(found)
    )
    (match,) = [m for m in found if m.issue.id == "hf_bnb_quantized_modules_offloaded"]
    assert json.loads(json.dumps(match.to_dict()))["kind"] == "cut"


def test_a_runs_error_matched_by_structure_says_so_in_its_verdict() -> None:
    found = judged([DEEPSPEED_6912])
    assert found is not None and found.kind == Kind.BANNER and found.possibly
    ref = found.issue.to_ref(found.issue.version_verdict({}), found.confirm, found.kind.value)
    assert ref.to_dict()["match"] == "banner" and ref.matched_by and "printed before it" in ref.matched_by


def test_matches_name_each_entry_once_by_its_strongest_kind() -> None:
    text = AUTOPOISON_6 + "RuntimeError: Error building extension 'cpu_adam'\n" + DEEPSPEED_6912
    ids = [m.issue.id for m in matches(text)]
    assert len(ids) == len(set(ids))


def test_the_frames_file_is_what_the_installed_sources_give() -> None:
    """Each row's function, exception and count as the installed sources give them (`read`, the release a row was
    read in, may name a local build's tag): `python -m ds_doctor.knowledge.frames --write` where they differ."""
    from ds_doctor.knowledge.frames import frames, shipped

    def rows(found: Iterable[Frame]) -> list[tuple[str, str, str, str, int]]:
        return [(f.issue, f.file, f.function, f.exception, f.raises) for f in found]

    assert rows(frames(catalog.ISSUES)) == rows(shipped())


# --- paraphrase: the failure named in prose, not by its message ---


def fresh(number: str) -> str:
    """A text of the sample gathered 2026-11-29 (its first run recorded before these entries were changed)."""
    return sample_text("2026-11-29", number)


@pytest.mark.parametrize(
    ("number", "entry"),
    [
        ("011", "cuda_oom"),  # "CUDA out of memory. Is it a matter of data size? ..."
        ("017", "cuda_oom"),  # "CUDA out of memory still exist after using FSDP"
        ("033", "cuda_oom"),  # "CUDA out of memory数据量很小，7b的模型"
        ("034", "hf_trainer_loss_nan"),  # "qwen2-1.5b + swift , loss nan"
        ("026", "hf_trainer_loss_nan"),  # "...grad_norm总是nan，loss=0"
        ("016", "nccl_watchdog_timeout"),  # "Problem in dpo_llama2.py? NCCL timeout?"
        ("039", "nccl_watchdog_timeout"),  # "torch.distributed.broadcast timeout"
    ],
)
def test_a_failure_named_in_prose_is_possibly_its_entry(number: str, entry: str) -> None:
    assert named(fresh(number))[entry] == (Kind.PARAPHRASE, "possibly")


@pytest.mark.parametrize(
    "text",
    [
        fresh("015"),  # an eval loss that is NaN while the training loss is finite: another path
        "{'loss': 1.7018, 'grad_norm': nan, 'learning_rate': 1.35e-06, 'epoch': 0.01}",  # one step the scaler skipped
        "the loss is nan-free after the fix; no timeout anywhere",
        "OOM killer is not involved; host RAM is fine",
    ],
)
def test_words_that_only_sound_like_a_failure_name_none(text: str) -> None:
    assert not {"hf_trainer_loss_nan", "cuda_oom", "nccl_watchdog_timeout"} & set(named(text))


@pytest.mark.parametrize(
    "number",
    [
        "024"  # "... the model crashes and appears Nan."
    ],
)
def test_a_run_said_to_turn_nan_is_possibly_the_nan_entry(number: str) -> None:
    assert named(sample_text("2026-11-29d", number))["hf_trainer_loss_nan"] == (Kind.PARAPHRASE, "possibly")
    assert named("after 300 steps the loss became NaN")["hf_trainer_loss_nan"] == (
        Kind.PARAPHRASE,
        "possibly",
    )
    assert named("NaN appeared in step 12")["hf_trainer_loss_nan"] == (Kind.PARAPHRASE, "possibly")


@pytest.mark.parametrize(
    "text",
    [
        "nanoGPT appears to train fine; the banana dataset becomes nanoscale",
        "finance becomes nanoscale",
        "df.fillna() turns None into NaN-free values",
    ],
)
def test_nan_as_a_word_in_other_sentences_names_none(text: str) -> None:
    assert "hf_trainer_loss_nan" not in named(text)


def test_a_kernel_fault_the_nccl_watchdog_reports_is_its_entry() -> None:
    # verl#3579, as its ticket shows it: the watchdog is first to hear of a misaligned address
    watchdog = (
        "(WorkerDict pid=2862157) [rank3]:[E923 11:14:11.615370309 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID "
        "0(default_pg) Rank 3] Process group watchdog thread terminated with exception: "
        "CUDA error: misaligned address\n"
        "(WorkerDict pid=2862157) CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect."
    )
    assert named(watchdog)["cuda_kernel_fault"] == (Kind.WORDING, "message only")
    # OpenRLHF#829: the title quotes 'CUDA error: unspecified launch failure'
    assert named(sample_text("2026-11-29d", "019"))["cuda_kernel_fault"] == (Kind.WORDING, "message only")
    assert "cuda_illegal_memory_access" not in named(watchdog)


def test_torchs_lines_under_an_nccl_error_are_read_where_a_title_cut_the_first() -> None:
    # 021: "...NCCLUtils.hpp:268, NCCL version 2.22.3 ncclSystemError: System call (e.g. socket, malloc) or ... Las"
    assert named(fresh("021"))["nccl_shm_system_error"] == (Kind.WORDING, "possibly")
    # 032's title: the process group's teardown after a collective timed out, cut after its first sentence
    assert named(fresh("032"))["nccl_watchdog_timeout"] == (Kind.CUT, "possibly")


def test_a_run_trusts_a_message_in_any_text_before_a_shape_in_the_first() -> None:
    """A case's texts come in order (the raised error, then what the ranks printed); a message a rank printed names
    the issue before a paraphrase or a banner in the error itself."""
    said = "RuntimeError: training stopped, the loss is nan at step 3"
    printed = "ValueError: Default process group has not been initialized, please make sure to call init_process_group."
    found = judged([said, printed])
    assert found is not None and (found.issue.id, found.kind) == (
        "default_process_group_not_initialized",
        Kind.WORDING,
    )
    alone = judged([said])
    assert alone is not None and (alone.issue.id, alone.kind, alone.possibly) == (
        "hf_trainer_loss_nan",
        Kind.PARAPHRASE,
        True,
    )


def sixth(number: str) -> str:
    return sample_text("2026-11-29f", number)


def test_a_native_stack_raising_from_the_watchdogs_timeout_check_is_possibly_the_timeout() -> None:
    # 005 (LLaMA-Factory, multi-node): only the watchdog's C++ frames, the message above them cut away
    assert named(sixth("005"))["nccl_watchdog_timeout"] == (Kind.FRAME, "possibly")
    # 023: the watchdog's frames without checkTimeout (it caught something else, which the text does not show)
    assert "nccl_watchdog_timeout" not in named(sixth("023"))


def test_plural_grad_norms_said_to_be_nan_and_a_pinned_range_hint_alone() -> None:
    assert named(sixth("011"))["hf_trainer_loss_nan"] == (
        Kind.PARAPHRASE,
        "possibly",
    )  # "grad Norms are always NaN"
    # the title keeps LLaMA-Factory's hint line alone, without the "is required for ..." sentence before it
    assert named(sixth("039"))["lf_dependency_version_check"] == (Kind.WORDING, "message only")

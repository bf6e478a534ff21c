"""A class is the answer only where no cause is: a launcher's summary that a rank failed, a segmentation fault, an
import error and a hang with no error are named on a text that shows nothing more specific, and give way to any
entry of its own cause in the same text (and a launcher's summary to a class too), in triage and in a run alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds_doctor.knowledge import catalog
from ds_doctor.knowledge.load import CatalogError, load_file
from ds_doctor.knowledge.matching import classify, judged
from ds_doctor.knowledge.structure import leads
from ds_doctor.knowledge.triage import triage
from tests.knowledge.samples import sample_text

#: torchrun's closing table where rank 1 raised an error of the user's own (no entry names it)
SUMMARY = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_17:49:58
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 12245)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
"""

#: the rank's own error above the same table: an entry of its own cause
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.14 GiB "
    "of which 1.12 GiB is free.\n"
)


#: Ray's lines when an actor's process died: its list of what might have killed it names SIGKILL and SIGSEGV as guesses
RAY = """\
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker \
unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. (1) The process \
is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker is crashed \
unexpectedly due to SIGSEGV or other unexpected errors.
"""


def named(text: str) -> list[str]:
    return [m.issue.id for m in triage(text, {})]


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        (SUMMARY, "launcher_child_failed"),
        (RAY, "launcher_child_failed"),
        (
            "[ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py'] exits with return code = 1",
            "launcher_child_failed",
        ),
        ("Error executing job with overrides: ['trainer.n_gpus_per_node=8']", "launcher_child_failed"),
        ("Segmentation fault (core dumped) when training Qwen2 with ZeRO-2", "native_crash_segfault"),
        (
            SUMMARY.replace("exitcode  : 1 (pid: 12245)", "exitcode  : -11 (pid: 12245)  (SIGSEGV)"),
            "native_crash_segfault",
        ),
        (
            "ImportError: cannot import name 'AdamW' from 'transformers' (/opt/venv/transformers/__init__.py)",
            "python_import_mismatch",
        ),
        ("ModuleNotFoundError: No module named 'swift.llm'", "python_import_mismatch"),
        ("Multi-node training hangs at the first all_reduce, no error", "distributed_hang_no_error"),
        ("多机训练卡住，没有报错", "distributed_hang_no_error"),
    ],
)
def test_a_class_is_named_where_nothing_more_specific_shows(text: str, entry: str) -> None:
    assert named(text) == [entry]


@pytest.mark.parametrize(
    ("text", "entry", "gone"),
    [
        (OOM + SUMMARY, "cuda_oom", "launcher_child_failed"),
        # the OOM killer's -9 in the same table is torchrun_child_sigkill's
        (
            SUMMARY.replace("exitcode  : 1 (pid: 12245)", "exitcode  : -9 (pid: 12245)"),
            "torchrun_child_sigkill",
            "launcher_child_failed",
        ),
        (
            "ImportError: cannot import name 'DataCollatorForCompletionOnlyLM' from 'trl' "
            "(/usr/local/lib/python3.11/dist-packages/trl/__init__.py)",
            "trl_removed_name_import",
            "python_import_mismatch",
        ),
        (
            "training hangs and then NCCL times out after 30 minutes",
            "nccl_watchdog_timeout",
            "distributed_hang_no_error",
        ),
        (
            "RuntimeError: DataLoader worker (pid 46794) is killed by signal: Segmentation fault.\n"
            "RuntimeError: DataLoader worker (pid(s) 46794) exited unexpectedly",
            "dataloader_worker_oom_killed",
            "native_crash_segfault",
        ),
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
            "asynchronously reported at some other API call",
            "cuda_illegal_memory_access",
            "cuda_error_unspecific",
        ),
        (
            "ValueError: Error occurred while packing the dataset. Make sure that your dataset has enough samples to "
            "at least yield one packed sequence.\n"
            "datasets.arrow_writer.SchemaInferenceError: Please pass `features` or at least one example when writing "
            "data",
            "trl_sft_packing_no_sequence",
            "datasets_load_failed",
        ),
        # the Last error line names the check: the entry for it, not the NCCL class
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
            "2588, internal error - please report this issue to the NCCL developers, NCCL version 2.21.5\n"
            "ncclInternalError: Internal check failed.\nLast error:\nBootstrap : no socket interface found",
            "nccl_bootstrap_no_socket_interface",
            "nccl_internal_error_unspecific",
        ),
        # ZeRO-3's empty placeholders in the file: that entry, not the state-dict class
        (
            "RuntimeError: Error(s) in loading state_dict for OPTForCausalLM:\n\tsize mismatch for "
            "model.decoder.layers.5.fc1.weight: copying a param with shape torch.Size([0]) from checkpoint, the shape "
            "in current model is torch.Size([10240, 2560]).",
            "ds_z3_partitioned_state_dict_saved",
            "state_dict_load_mismatch",
        ),
    ],
)
def test_a_class_gives_way_to_an_entry_of_its_own_cause(text: str, entry: str, gone: str) -> None:
    found = named(text)
    assert entry in found and gone not in found
    assert gone not in {issue.id for issue in classify(text)}


def test_a_run_gives_the_class_way_to_a_cause_in_another_text() -> None:
    """A run's error is the launcher's summary and a rank's own lines hold the OOM: the run names the OOM."""
    found = judged([SUMMARY, OOM])
    assert found is not None and found.issue.id == "cuda_oom"
    alone = judged([SUMMARY])
    assert alone is not None and alone.issue.id == "launcher_child_failed"


def test_the_classes_are_the_ones_marked_in_the_catalog() -> None:
    marked = {issue.id: issue.fallback for issue in catalog.ISSUES if issue.fallback}
    assert marked == {
        "launcher_child_failed": 2,
        "native_crash_segfault": 1,
        "python_import_mismatch": 1,
        "distributed_hang_no_error": 1,
        "datasets_load_failed": 1,
        "cuda_error_unspecific": 1,
        "state_dict_load_mismatch": 1,
        "nccl_internal_error_unspecific": 1,
        "nccl_invalid_usage_unspecific": 1,
        # a secondary error of DeepSpeedCPUAdam's __del__: the constructor's own exception is the cause
        "ds_cpu_adam_build_failed": 1,
        "device_mismatch_cpu_accelerator": 1,
        "python_call_keyword_mismatch": 1,
    }


@pytest.mark.parametrize("value", ["true", "3", "'yes'"])
def test_a_fallback_is_one_or_two(tmp_path: Path, value: str) -> None:
    path = tmp_path / "x.toml"
    path.write_text(
        "format = 1\n[[issue]]\nid = 'x'\ntitle = 't'\npackage = 'torch'\npatterns = ['a']\ncause = 'c'\n"
        f"remedy = 'r'\nrefs = ['https://example.org/1']\nfallback = {value}\n"
    )
    with pytest.raises(CatalogError, match="fallback"):
        load_file(path)


@pytest.mark.parametrize(
    ("sample", "number", "entry"),
    [
        # sample 48g's first run
        (
            "2026-11-29g",
            "104",
            "shm_exhausted_sigbus",
        ),  # "crashes with return code=-7": the DeepSpeed launcher's SIGBUS
        ("2026-11-29g", "203", "nccl_watchdog_timeout"),  # "collective operation timeout (AllGather,Reduce)"
        (
            "2026-11-29g",
            "310",
            "launcher_child_failed",
        ),  # torchrun's title row alone: ".../launcher.py FAILED"
        (
            "2026-11-29g",
            "312",
            "launcher_child_failed",
        ),  # torchrun's agent: "failed (exitcode: 1) local_rank: 0"
        (
            "2026-11-29g",
            "403",
            "launcher_child_failed",
        ),  # the DeepSpeed launcher's "Killing subprocess" lines
        (
            "2026-11-29g",
            "315",
            "cublas_not_initialized",
        ),  # CUBLAS_STATUS_ALLOC_FAILED at cublasCreate: out of memory
        (
            "2026-11-29g",
            "405",
            "python_import_mismatch",
        ),  # "No module named 'swift.cli.main'", no exception's name
        (
            "2026-11-29g",
            "420",
            "nccl_unhandled_cuda_error",
        ),  # "NCCL P2P Access Not Supported Between Devices"
        # sample 48h's first run
        ("2026-11-29h", "102", "launcher_child_failed"),  # "...elastic.multiprocessing.api:failed", cut there
        (
            "2026-11-29h",
            "104",
            "env_rendezvous_variables_unset",
        ),  # KeyError: 'LOCAL_RANK': run without a launcher
        (
            "2026-11-29h",
            "308",
            "python_import_mismatch",
        ),  # "module '...' has no attribute 'LLAMA_ATTENTION_CLASSES'"
        ("2026-11-29h", "401", "hf_argparser_unused_args"),  # ms-swift's "ValueError: remaining_argv: [...]"
        # sample 48i's first run
        (
            "2026-11-29i",
            "102",
            "launcher_child_failed",
        ),  # DeepSpeed-Chat: "Step 1 exited with non-zero status 1"
        ("2026-11-29i", "402", "launcher_child_failed"),  # Ray: "The actor <id> is unavailable"
        (
            "2026-11-29i",
            "411",
            "launcher_child_failed",
        ),  # torchrun's "Sending process N closing signal SIGTERM" alone
        (
            "2026-11-29i",
            "203",
            "env_rendezvous_variables_unset",
        ),  # "Using fsdp only works in distributed training."
        (
            "2026-11-29i",
            "302",
            "hf_remote_code_old_gradient_checkpointing",
        ),  # the message as a title, no frame
        (
            "2026-11-29i",
            "304",
            "datasets_load_failed",
        ),  # LLaMA-Factory: "Cannot open data\dataset_info.json due to"
        ("2026-11-29i", "404", "hf_trainer_loss_nan"),  # "指标会变成 nan" (a metric becomes nan)
        # ZeRO-3's fetch assert with an INFLIGHT summary
        ("2026-11-29j", "101", "ds_z3_param_not_available_on_fetch"),
        (
            "2026-11-29j",
            "405",
            "trl_grpo_vllm_server_unreachable",
        ),  # ms-swift's "Server is not up yet." alone
        # Ray's "Unhandled error (suppress with ...): ray::WorkerDict..." and Hydra's HYDRA_FULL_ERROR line
        ("2026-11-30l", "408", "launcher_child_failed"),
        ("2026-11-30l", "406", "launcher_child_failed"),  # vLLM's "Worker failed with error ''"
        (
            "2026-11-30k",
            "304",
            "hf_bf16_unsupported_gpu",
        ),  # axolotl's own "bf16 requested, but AMP is not supported"
        # eight of sample m's nine misses, each a wording read in its source
        ("2026-11-30m", "106", "flash_attn_needs_ampere"),  # "Expected is_sm80 || is_sm90 to be true"
        ("2026-11-30m", "301", "nccl_unhandled_cuda_error"),  # "NCCL Cuda failure 999 'unknown error'"
        (
            "2026-11-30m",
            "308",
            "cuda_error_unspecific",
        ),  # bitsandbytes' "Error ... at line 119 in file ops.cu"
        (
            "2026-11-30m",
            "414",
            "flash_attn_abi_mismatch",
        ),  # "DLL load failed while importing flash_attn_2_cuda"
        ("2026-11-30m", "407", "cuda_no_kernel_image"),  # "named symbol not found", as "possibly"
        ("2026-11-30m", "408", "python_import_mismatch"),  # "'_OpNamespace' '_C' object has no attribute"
        (
            "2026-11-30m",
            "415",
            "python_import_mismatch",
        ),  # "No package metadata was found for flashattn-hopper"
        (
            "2026-11-30m",
            "302",
            "python_import_mismatch",
        ),  # Unsloth's "your xformers version of ... is too new"
        # sample n's
        ("2026-11-30n", "101", "ds_fp16_loss_scale_at_minimum"),  # the message without "Current", as a title
        ("2026-11-30n", "104", "python_import_mismatch"),  # slurmstepd's "execve(): accelerate: No such file"
        ("2026-11-30n", "105", "host_ram_allocation_failed"),  # "std::bad_alloc", as "possibly"
        ("2026-11-30n", "202", "device_mismatch_across_gpus"),  # "Device Mismatch Error" in a title
        ("2026-11-30n", "303", "hf_model_files_not_found"),  # sentencepiece's "TypeError: not a string"
        ("2026-11-30n", "305", "nccl_not_in_torch_build"),  # retyped: "doesn't hava NCCL built in"
        ("2026-11-30n", "306", "launcher_child_failed"),  # axolotl's "Failed to train/fine-tune config"
        ("2026-11-30n", "309", "python_import_mismatch"),  # torchao's warning, as "possibly"
        ("2026-11-30n", "310", "python_import_mismatch"),  # "报错No module named": glued to a Chinese title
        ("2026-11-30n", "410", "cuda_no_kernel_image"),  # "HIP error: invalid device function"
        # sample o's
        ("2026-11-30o", "106", "shm_exhausted_sigbus"),  # "Exit with code -7", as "possibly"
        ("2026-11-30o", "302", "datasets_load_failed"),  # "Not able to read records in the JSON file at"
        ("2026-11-30o", "304", "peft_target_modules_not_found"),  # "not found in base model", without "the"
        ("2026-11-30o", "306", "state_dict_load_mismatch"),  # Accelerate's "Trying to set a tensor of shape"
        (
            "2026-11-30o",
            "311",
            "python_import_mismatch",
        ),  # Windows' "不是内部或外部命令" for llamafactory-cli
        ("2026-11-30o", "404", "hf_trainer_accelerate_missing"),  # "data_seed requires Accelerate version"
        ("2026-11-30o", "407", "datasets_load_failed"),  # "Feature type 'List' not found"
        ("2026-11-30o", "408", "cuda_no_kernel_image"),  # torch's sm_120 warning retyped, as "possibly"
        (
            "2026-11-30o",
            "412",
            "cuda_driver_too_old",
        ),  # "the provided PTX was compiled with an unsupported toolchain"
        # sample p's
        ("2026-11-30p", "301", "nccl_ib_completion_error"),  # "NET/IB : Got async event : port error"
        ("2026-11-30p", "305", "hf_argparser_unused_args"),  # LLaMA-Factory's "Got unknown args"
        # sample q's
        (
            "2026-11-30q",
            "204",
            "acc_accelerator_kwarg_version_skew",
        ),  # "GradientAccumulationPlugin.__init__() got an unexpected keyword argument"
        ("2026-11-30q", "206", "distributed_hang_no_error"),  # "vllm server generating stuck"
        ("2026-11-30q", "207", "python_import_mismatch"),  # a bare "ModuleNotFoundError" in a title
        ("2026-11-30q", "304", "datasets_load_failed"),  # pyarrow's "ArrowInvalid: JSON parse error"
        ("2026-11-30q", "312", "datasets_load_failed"),  # LLaMA-Factory's raise line, its message cut
        (
            "2026-11-30q",
            "406",
            "ds_batch_size_arithmetic",
        ),  # "Gradient accumulation steps: {grad_acc} has to be greater than 0"
        ("2026-11-30q", "407", "ds_z3_inflight_params"),  # "Invalidate trace cache @ step", as "possibly"
        ("2026-11-30q", "408", "distributed_hang_no_error"),  # "vllm +zero2 hangs"
        ("2026-11-30q", "411", "host_ram_allocation_failed"),  # "内存 ... oom": the host's memory
        ("2026-11-30q", "414", "lf_no_valid_samples"),  # ms-swift's "filtered dataset length: 0"
        ("2026-11-30q", "419", "launcher_child_failed"),  # Ray's "RayTaskError(TypeError)"
        # sample r's
        ("2026-11-30r", "102", "optimizer_empty_param_list"),  # before DeepSpeedCPUAdam's __del__ error
        ("2026-11-30r", "106", "host_ram_allocation_failed"),  # "OOM out of CPU memory"
        ("2026-11-30r", "203", "fsdp1_submodule_called_outside_root_forward"),  # "data is not allocated yet"
        ("2026-11-30r", "302", "nccl_ib_collective_size_mismatch"),  # NET/IB's "collective mismatch error"
        ("2026-11-30r", "305", "state_dict_load_mismatch"),  # a bare "size mismatch" in a title
        ("2026-11-30r", "306", "cuda_illegal_memory_access"),  # "illegal memory" in a title
        ("2026-11-30r", "307", "lf_no_valid_samples"),  # "Cannot find valid samples" without its hint
        ("2026-11-30r", "309", "acc_megatron_lm_not_available"),  # "Megatron is not installed"
        ("2026-11-30r", "311", "hf_model_files_not_found"),  # a TypeError, then SentencePiece's Load
        ("2026-11-30r", "413", "nccl_watchdog_timeout"),  # "zero 3 stage ... time out error"
        ("2026-11-30r", "416", "torchrun_child_sigkill"),  # Ray's memory monitor killing a worker
        # sample s's
        ("2026-11-30s", "104", "hf_trainer_empty_batch"),  # features printed "[{}, {}, {}, {}]"
        ("2026-11-30s", "301", "distributed_hang_no_error"),  # "2.21.5 hangs" in NCCL's tracker
        ("2026-11-30s", "313", "lf_tokenizer_load_failed"),  # LLaMA-Factory's "Failed to load tokenizer."
        ("2026-11-30s", "314", "distributed_hang_no_error"),  # "Axolotl hanging on bench evals with fsdp"
        ("2026-11-30s", "315", "distributed_hang_no_error"),  # "ZeRO3微调卡住"
        ("2026-11-30s", "404", "python_import_mismatch"),  # "module X has no attribute Y" alone
        ("2026-11-30s", "408", "distributed_hang_no_error"),  # "vllm在init engine后卡住"
        ("2026-11-30s", "411", "distributed_hang_no_error"),  # "Program hang ... without error"
        ("2026-11-30s", "416", "torchrun_child_sigkill"),  # "Ray OOM causes the process to be killed"
        # sample t's
        ("2026-11-30t", "103", "device_mismatch_cpu_accelerator"),  # "cuda:0 and cpu", no cause shown
        (
            "2026-11-30t",
            "104",
            "ds_z3_no_trainable_param",
        ),  # "max() arg is an empty sequence ... zero stage3"
        ("2026-11-30t", "201", "hf_trainer_loss_nan"),  # "training instability (NaN)"
        (
            "2026-11-30t",
            "306",
            "peft_config_field_unknown_to_release",
        ),  # "LoraConfig.init()", underscores eaten
        ("2026-11-30t", "415", "cuda_oom"),  # "FSDP backend OOMs during resume"
        # sample u's
        ("2026-11-30u", "203", "ds_z12_empty_param_group"),  # the flatten's own line, no file frame
        ("2026-11-30u", "404", "distributed_hang_no_error"),  # "Dataset stucked when using ..."
        (
            "2026-11-30u",
            "311",
            "optimizer_foreach_tensors_device_dtype_mismatch",
        ),  # the foreach grouping's message, cut short in a title
        # sample v's
        ("2026-11-30v", "101", "datasets_load_failed"),  # load_from_disk's "Directory ... not found"
        ("2026-11-30v", "103", "hf_tokenizer_no_pad_token"),  # the collator's "does not have one."
        ("2026-11-30v", "202", "hf_tokenizer_no_pad_token"),  # TRL's collator padding with None
        ("2026-11-30v", "403", "hf_argparser_unused_args"),  # "ValueError remaining_argv" in a title
        ("2026-11-30v", "408", "hf_model_files_not_found"),  # huggingface_hub's "Repo id must be in the form"
        # sample zf's
        (
            "2026-11-30zf",
            "101",
            "default_process_group_not_initialized",
        ),  # torch 1.x's AssertionError wording
        (
            "2026-11-30zf",
            "205",
            "nccl_duplicate_gpu",
        ),  # "duplicate GPU detected (rank 0 and rank 1 ...", retyped
        ("2026-11-30zf", "301", "distributed_hang_no_error"),  # a dataset bar's description, then "卡住"
        ("2026-11-30zf", "407", "state_dict_load_mismatch"),  # vLLM's weight loader's size assertion
        (
            "2026-11-30zf",
            "409",
            "python_call_keyword_mismatch",
        ),  # "missing required positional arguments: 'a'"
        # sample zg's: torch's narrow on an empty tensor, in vLLM; DPOTrainer handed transformers' arguments
        ("2026-11-30zg", "403", "ds_z3_partitioned_state_dict_saved"),
        ("2026-11-30zg", "405", "trl_trainer_argument_moved"),
        # sample zh's: a CUDA code without its message, NCCL's IB error with the peer's address rendered away,
        # DeepSpeed's op by its name alone, ms-swift 2.x's dataset-format refusal
        ("2026-12-01zh", "104", "cuda_illegal_memory_access"),
        ("2026-12-01zh", "301", "nccl_ib_completion_error"),
        ("2026-12-01zh", "305", "ds_jit_op_compile_failed"),
        ("2026-12-01zh", "401", "lf_no_valid_samples"),
        # sample zi's: torch's DETAIL check naming the ranks' different collectives, a title retelling a verbs
        # completion's status and vendor error, torch's stack of unequal tensors in default_collate
        ("2026-12-01zi", "103", "distributed_hang_no_error"),
        ("2026-12-01zi", "309", "nccl_ib_completion_error"),
        ("2026-12-01zi", "307", "hf_batch_tensor_unequal_lengths"),
        # sample zj's: a title saying the launcher hangs, a message retyped from its middle, flash-attn's
        # backward check retold
        ("2026-12-01zj", "103", "distributed_hang_no_error"),
        ("2026-12-01zj", "105", "acc_state_attrs_missing_version_skew"),
        ("2026-12-01zj", "401", "flash_attn_needs_ampere"),
        # sample zm's: NaNs for the loss in a reporter's prose, cuBLAS refusing a call's argument
        ("2026-12-01zm", "103", "hf_trainer_loss_nan"),
        ("2026-12-01zm", "402", "cuda_error_unspecific"),
        # sample zn's: a gradient read back NaN by name, Megatron's grad-norm check, ZeRO-3 reading an empty first
        # group, LLaMA-Factory's first releases' bare StopIteration, "Address already in use" in a title
        ("2026-12-02zn", "102", "hf_trainer_loss_nan"),
        ("2026-12-02zn", "401", "hf_trainer_loss_nan"),
        ("2026-12-02zn", "305", "ds_z3_no_trainable_param"),
        ("2026-12-02zn", "306", "lf_no_valid_samples"),
        ("2026-12-02zn", "402", "torchrun_port_in_use"),
        # sample zo's: torch's errno 110 alone, NCCL's connect with the port redacted, the CPU allocator's capitals
        # retyped, CPython's circular import by its tail
        ("2026-12-02zo", "102", "torchrun_rendezvous_unreachable"),
        ("2026-12-02zo", "303", "nccl_socket_connect_failed"),
        ("2026-12-02zo", "306", "host_ram_allocation_failed"),
        ("2026-12-02zo", "405", "python_import_mismatch"),
        ("2026-12-02zo", "302", "nccl_socket_message_truncated"),  # labelled with the IB entry, by cause
        # sample zp's: ms-swift 1.x's assert, NaN said of a training run
        ("2026-12-02zp", "401", "swift_deepspeed_with_device_map_mp"),
        ("2026-12-02zp", "406", "hf_trainer_loss_nan"),
        # sample zq's: the heartbeat's first words in a title, a GPU leak said beside 内存, fp16 overflowing step after
        # step, safetensors' ENOSPC, a fine-tuning that hangs, the Hub not reached for a dataset, Ray's full disk
        ("2026-12-02zq", "202", "nccl_watchdog_heartbeat_stuck"),
        ("2026-12-02zq", "303", "cuda_oom"),
        ("2026-12-02zq", "304", "ds_fp16_loss_scale_at_minimum"),
        ("2026-12-02zq", "307", "disk_full_on_save"),
        ("2026-12-02zq", "308", "distributed_hang_no_error"),
        ("2026-12-02zq", "309", "datasets_load_failed"),
        ("2026-12-02zq", "402", "disk_full_on_save"),
        # sample zr's: torch's headers refusing an old gcc, a deadlock "in distribution", NCCL's IB completion error
        # retyped, a bus error in ncclCommInitRank, datasets' map worker dying, a job "pending", datasets' disk
        # check, a hang said of two machines reading data
        ("2026-12-02zr", "102", "ds_jit_op_compile_failed"),
        ("2026-12-02zr", "104", "distributed_hang_no_error"),
        ("2026-12-02zr", "301", "nccl_ib_completion_error"),
        ("2026-12-02zr", "302", "shm_exhausted_sigbus"),
        ("2026-12-02zr", "304", "dataloader_worker_oom_killed"),
        ("2026-12-02zr", "306", "dataloader_worker_oom_killed"),
        ("2026-12-02zr", "305", "distributed_hang_no_error"),
        ("2026-12-02zr", "310", "datasets_load_failed"),
        ("2026-12-02zr", "403", "distributed_hang_no_error"),
        # sample zs's: NFS's stale handle on the datasets cache, LLaMA-Factory's older "Empty dataset!" guard
        ("2026-12-02zs", "302", "datasets_load_failed"),
        ("2026-12-02zs", "306", "lf_no_valid_samples"),
        # sample zt's: the launcher's slot check retyped, a timeout said of distributed training, a StopIteration said
        # of the sharegpt format, CPython's "Fatal Python error: Bus error", get_dataset beside FileNotFoundError
        ("2026-12-02zt", "101", "ds_launcher_include_slot_missing"),
        ("2026-12-02zt", "201", "nccl_watchdog_timeout"),
        ("2026-12-02zt", "302", "lf_no_valid_samples"),
        ("2026-12-02zt", "303", "shm_exhausted_sigbus"),
        ("2026-12-02zt", "308", "datasets_load_failed"),
        # sample zu's: "collective timeouts" without "operation", a StopIteration said of SFT, the indexing message
        # with the CPU tensor indexed
        ("2026-12-02zu", "201", "nccl_watchdog_timeout"),
        ("2026-12-02zu", "304", "lf_no_valid_samples"),
        ("2026-12-02zu", "305", "device_mismatch_cpu_accelerator"),
        # sample zv's: the store's "Socket Timeout" said of NCCL, a retyped OS error on the datasets builder cache,
        # safetensors' HeaderTooLarge alone
        ("2026-12-02zv", "203", "nccl_unique_id_store_timeout"),
        ("2026-12-02zv", "302", "datasets_load_failed"),
        ("2026-12-02zv", "401", "safetensors_file_unreadable"),
        # sample zw's: DeepSpeed-Chat's step failure without its status number, a gated repo not granted, PEFT's
        # sibling check of its target modules
        ("2026-12-02zw", "101", "launcher_child_failed"),
        ("2026-12-02zw", "303", "hf_model_files_not_found"),
        ("2026-12-02zw", "402", "peft_target_modules_not_found"),
        # sample zx's: a CPU Adam frame under pdsh's host prefix, LoRA's check of a module it cannot wrap
        ("2026-12-02zx", "101", "ds_cpu_adam_build_failed"),
        ("2026-12-02zx", "303", "peft_target_modules_not_found"),
        # sample zza's (the widened protocol's first): the trainer or its validation said to hang, a hang said with
        # accelerate, the Trainer's loss 0 and NaN grad norm in prose, ColossalAI's launcher, NCCL's socket warning in
        # prose, an empty dataset repository, a save's makedirs meeting its folder
        ("2026-12-02zza", "103", "distributed_hang_no_error"),
        ("2026-12-02zza", "107", "distributed_hang_no_error"),
        ("2026-12-02zza", "115", "distributed_hang_no_error"),
        ("2026-12-02zza", "110", "hf_trainer_loss_nan"),
        ("2026-12-02zza", "205", "launcher_child_failed"),
        ("2026-12-02zza", "224", "nccl_bootstrap_no_socket_interface"),
        ("2026-12-02zza", "225", "datasets_load_failed"),
        ("2026-12-02zza", "419", "checkpoint_path_race_across_ranks"),
        # sample zzb's (after zza's fixes): "DDP training timeout", tensorboardX's NaN check, the keyword TypeError
        # retold in a title, stuck for minutes in Chinese, DeepSpeed-Chat's RL losses logged inf
        ("2026-12-02zzb", "102", "nccl_watchdog_timeout"),
        ("2026-12-02zzb", "211", "hf_trainer_loss_nan"),
        ("2026-12-02zzb", "301", "python_call_keyword_mismatch"),
        ("2026-12-02zzb", "405", "distributed_hang_no_error"),
        ("2026-12-02zzb", "416", "hf_trainer_loss_nan"),
        # labelled "none" when the catalog lacked them: entries of their own since
        ("2026-12-02zq", "105", "acc_launch_multi_gpu_one_gpu_id"),
        ("2026-12-02zs", "305", "torch_device_string_invalid"),
        ("2026-11-29e", "034", "checkpoint_path_race_across_ranks"),
        ("2026-12-02zy", "401", "checkpoint_path_race_across_ranks"),
    ],
)
def test_what_a_samples_first_run_missed_is_named_now(sample: str, number: str, entry: str) -> None:
    """The first run of each sample (recorded before these changes) missed each; what it led to is named now."""
    assert entry in named(sample_text(sample, number))


def test_a_keyword_no_accelerate_release_takes_is_the_callers_misspelling() -> None:
    """48u's 104 (a false claim of its first run): `kwargs_handler`, which no Accelerator() ever took, is no skew of
    releases; a keyword one release took and another did not still is."""
    assert "acc_accelerator_kwarg_version_skew" not in named(sample_text("2026-11-30u", "104"))
    for keyword in ("dispatch_batches", "logging_dir", "dataloader_config", "parallelism_config"):
        text = f"TypeError: Accelerator.__init__() got an unexpected keyword argument '{keyword}'"
        assert "acc_accelerator_kwarg_version_skew" in named(text), keyword


def test_a_keyword_the_callee_does_not_take_is_a_class_under_the_known_pairs() -> None:
    """48u's five "got an unexpected keyword argument" texts (PEFT's layers under a diffusers dev release, a 'token'
    keyword, axolotl's GRPO config, ms-swift's video helper, the misspelt kwargs_handler): the class, where no entry
    of a known pair of releases fits; where one fits, that entry alone."""
    for number in ("104", "202", "304", "308", "405"):
        assert named(sample_text("2026-11-30u", number)) == ["python_call_keyword_mismatch"], number
    known = "TypeError: LoraConfig.__init__() got an unexpected keyword argument 'use_dora'"
    assert named(known) == ["peft_config_field_unknown_to_release"]


def test_host_memory_said_in_chinese_is_not_the_gpu_s() -> None:
    """48q's 411: "内存 ... oom" is the host's memory running out (the GPU's is 显存): not CUDA's out of memory."""
    assert "cuda_oom" not in named(sample_text("2026-11-30q", "411"))
    assert "cuda_oom" in named("训练到一半显存不足，OOM")
    # zq's 303: a leak suspected in 内存 (memory), the GPU's use rising to the OOM: the GPU's memory, not the host's
    assert named(sample_text("2026-12-02zq", "303")) == ["cuda_oom"]
    assert "cuda_oom" not in named("内存泄漏，训练到一半 OOM 了")


def test_host_memory_said_in_english_or_by_ray_is_not_the_gpu_s() -> None:
    """48r's 106 and 416: "OOM out of CPU memory", "out of memory - cpu" and Ray's memory monitor ("killed due to
    memory pressure (OOM)", ray.exceptions.OutOfMemoryError) are the host's memory, not CUDA's; the GPU's still is."""
    for number in ("106", "416"):
        assert "cuda_oom" not in named(sample_text("2026-11-30r", number)), number
    assert "cuda_oom" not in named("Ray::TaskRunner.run out of memory - cpu")
    assert "cuda_oom" not in named(sample_text("2026-11-30s", "416"))  # "Ray OOM causes ... to be killed"
    assert "cuda_oom" in named("Training OOM at step 3 on 8xA100")
    assert "cuda_oom" in named("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")


def test_the_wider_hang_timeout_and_oom_words_stay_where_they_were_meant() -> None:
    """What 48r's and 48s's wider paraphrases met on the earlier samples, each mended: "hang" inside "changed" after
    "zero2.json"; DeepSpeed's warning "if you experience slowdowns or hanging when DeepSpeed exits"; a rendezvous
    socket that timed out under torchrun (not the NCCL watchdog); and OpenRLHF's train_ppo_ray script's OOM, which is
    not Ray's memory monitor."""
    assert named(sample_text("../triage_heldout", "017")) == []
    assert "distributed_hang_no_error" not in named(sample_text("../triage_heldout", "037"))
    assert named(sample_text("2026-11-30n", "204")) == ["torchrun_rendezvous_unreachable"]
    assert named(sample_text("2026-11-29g", "414")) == ["cuda_oom"]


def test_frozen_said_of_layers_is_no_hang() -> None:
    """ "frozen" is a hang word only where it is said of the job: frozen layers, parameters or an encoder (the S1 and
    S3 families' own words) are not; the trainer or its validation said to freeze or stick is (48zza's 103, 107)."""
    for text in (
        "Training with frozen layers raises ValueError: x",
        "Trainer with a frozen embedding: KeyError",
        "DeepSpeed with frozen vision encoder params fails",
        "validation loss stuck at 2.3 after epoch 1",
    ):
        assert "distributed_hang_no_error" not in named(text), text
    for text in ("multi-gpu training is frozen", "PyTorch Lightning Trainer freezes after 2 epochs"):
        assert "distributed_hang_no_error" in named(text), text


def test_stuck_for_minutes_in_chinese_is_a_hang_and_a_count_of_cards_is_not() -> None:
    """卡在 ... N分钟 / 一动不动 (stuck for minutes, motionless) is a hang whatever the subject (48zzb's 405);
    8卡 (eight cards) and 显卡 (a graphics card) followed by 在 are not."""
    assert "distributed_hang_no_error" in named("甚至于卡在此处50分钟一动不动")
    assert "distributed_hang_no_error" not in named("8卡在10分钟内跑完了一个epoch")
    assert "distributed_hang_no_error" not in named("显卡在5分钟后温度很高")


def test_a_secondary_error_gives_way_to_the_first() -> None:
    """DeepSpeedCPUAdam's __del__ error ('ds_opt_adam') follows the constructor's own exception: that one is named;
    alone, the build failure it most often follows still is."""
    first = "ValueError: optimizer got an empty parameter list"
    second = "AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'"
    assert named(f"{first}\n{second}") == ["optimizer_empty_param_list"]
    assert named(second) == ["ds_cpu_adam_build_failed"]


def test_a_meta_tensor_at_initialisation_is_no_checkpoint_saved_from_meta() -> None:
    """48zi's 403 (its first run's false claim): "Cannot copy out of meta tensor; no data!" at a ZeRO-3 model's
    initialisation, DeepSpeed named in the title; the checkpoint entry needs a load in the text."""
    assert "ds_ckpt_meta_params_saved" not in named(sample_text("2026-12-01zi", "403"))
    loading = (
        "deepspeed/runtime/engine.py, in load_module_state_dict\nRuntimeError: Error(s) in loading state_dict for "
        'M:\n\tWhile copying the parameter named "w", an exception occurred : (\'Cannot copy out of meta tensor; '
        "no data!',)."
    )
    assert "ds_ckpt_meta_params_saved" in named(loading)


def test_an_os_error_cut_before_its_path_names_no_entry() -> None:
    """48h's 302: Python's "[Errno 2] No such file or directory" alone is every missing file, not DeepSpeed's missing
    optimizer shard, whose wording begins so: a cut match needs a word past the operating system's text."""
    assert "ds_ckpt_zero_optim_file_missing" not in named(sample_text("2026-11-29h", "302"))
    (lead,) = [lead for lead in leads(catalog.ISSUES) if lead.issue == "ds_ckpt_zero_optim_file_missing"]
    assert lead.distinct > len("[errno 2] no such file or directory: ")


@pytest.mark.parametrize(
    ("sample", "number", "entry"),
    [
        ("2026-11-29", "018", "cuda_error_unspecific"),  # "CUDA error: unknown error" under FSDP
        ("2026-11-29g", "302", "cuda_error_unspecific"),  # "CUDA error: peer mapping resources exhausted"
        (
            "2026-11-29g",
            "411",
            "cuda_error_unspecific",
        ),  # "OS call failed or operation not supported on this OS"
        ("2026-11-29h", "309", "cuda_error_unspecific"),  # "CUDA driver error: invalid argument", title only
        ("2026-11-29g", "202", "datasets_load_failed"),  # SchemaInferenceError after "0 examples"
        ("2026-11-29h", "312", "datasets_load_failed"),  # a local .json read as a dataset script
        ("2026-11-29h", "408", "datasets_load_failed"),  # "Couldn't find cache for ... for config 'default'"
        (
            "2026-11-29g",
            "319",
            "hf_trainer_resume_no_valid_checkpoint",
        ),  # resume of a save_only_model checkpoint
        ("2026-11-29g", "321", "hf_trainer_resume_no_valid_checkpoint"),  # axolotl's auto-resume under ZeRO-2
        ("2026-11-29g", "410", "hf_trainer_empty_batch"),  # the raising f-string's second line alone
        (
            "2026-11-29h",
            "201",
            "hf_model_files_not_found",
        ),  # "does not appear to have a file named config.json"
        (
            "2026-11-29j",
            "104",
            "ds_z3_param_twice_in_ipg_bucket",
        ),  # "params_in_ipg_bucket AssertionError" title
        (
            "2026-11-29j",
            "402",
            "acc_meta_weight_no_value",
        ),  # "weight is on the meta device, we need a `value`"
        (
            "2026-11-29j",
            "203",
            "state_dict_load_mismatch",
        ),  # a DTensor shard's size mismatch under FSDP2 + TP
        ("2026-11-29e", "006", "nccl_internal_error_unspecific"),  # ncclInternalError with no Last error line
        ("2026-11-29", "022", "nccl_internal_error_unspecific"),  # "internal check failed" on two machines
        # ZeRO-3's "expected the next 4 parameters in the parameter fetch queue to be ... but got ()" title
        ("2026-11-29b", "001", "ds_z3_prefetch_trace_mismatch"),
        (
            "2026-11-30l",
            "301",
            "nccl_invalid_usage_unspecific",
        ),  # a title-only ProcessGroupNCCL "invalid usage"
        # sample zk's three recurring texts (and zj's 406, the same ms-swift check): each class an entry now
        # PEFT 0.2's LoraModel._get_submodules; "We need an 'offload-dir' ..." retyped; "... not compatible with
        # MP. n_gpu: 2"; the raise line, host-prefixed
        ("2026-12-01zk", "201", "peft_lora_get_submodules_moved"),
        ("2026-12-01zk", "303", "hf_device_map_disk_offload_no_dir"),
        ("2026-12-01zk", "403", "swift_deepspeed_with_device_map_mp"),
        ("2026-12-01zj", "406", "swift_deepspeed_with_device_map_mp"),
        (
            "2026-11-30o",
            "301",
            "hf_device_map_disk_offload_no_dir",
        ),  # the same check at a LLaMA-Factory export
    ],
)
def test_what_the_samples_labelled_none_for_want_of_an_entry_is_named_now(
    sample: str, number: str, entry: str
) -> None:
    """Texts whose cause earlier samples labelled 'none' because the catalog had no entry (the recurring kinds 48g
    and 48h met most: a CUDA error that names no cause, a dataset that would not load, a resume or a model folder
    without the files it needs, a batch emptied of its columns): each is named by the entry added for it, alone."""
    assert named(sample_text(sample, number)) == [entry]


def test_a_timeout_said_of_distributed_training_is_the_watchdogs_and_of_its_start_is_not() -> None:
    """Sample zt's 201: a timeout said of the training is possibly the watchdog's; said of starting it, the store's
    or the rendezvous' wait is as likely, and the watchdog is not named."""
    assert "nccl_watchdog_timeout" in named("Timeout in distributed training\n")
    assert "nccl_watchdog_timeout" in named("distributed training timed out after 30 minutes\n")
    assert "nccl_watchdog_timeout" not in named("Initializing distributed training timed out\n")
    assert "lf_no_valid_samples" not in named("StopIteration when the DataLoader runs out in my own loop\n")
    # sample zu's 304 is a StopIteration said of SFT; a data iterator run out at a later step is not an empty dataset
    assert "lf_no_valid_samples" not in named(sample_text("2026-11-29i", "405"))


def test_a_progress_bar_at_zero_is_not_a_dataset_failure() -> None:
    """datasets prints 'Generating train split: 0 examples' at the start of every split: nothing failed."""
    assert (
        named(
            "Generating train split: 0 examples [00:00, ? examples/s]\nGenerating train split: 19255347 "
            "examples [03:14, 97585.27 examples/s]"
        )
        == []
    )


def test_the_old_remote_codes_message_alone_is_only_possibly_its_entry_and_never_beside_diffusers() -> None:
    """48i's 302 is the message as a title: no frame says whose _set_gradient_checkpointing raised it, so the entry is
    named as "possibly"; where diffusers' frame shows (its look-alike), not at all."""
    found = [
        m
        for m in triage(sample_text("2026-11-29i", "302"), {})
        if m.issue.id == "hf_remote_code_old_gradient_checkpointing"
    ]
    assert [m.strength for m in found] == ["possibly"]
    diffusers = (
        '  File "/opt/conda/lib/python3.10/site-packages/diffusers/models/modeling_utils.py", line 221, in '
        "enable_gradient_checkpointing\n    self._set_gradient_checkpointing(enable=True)\n"
        "TypeError: _set_gradient_checkpointing() got an unexpected keyword argument 'enable'"
    )
    assert "hf_remote_code_old_gradient_checkpointing" not in named(diffusers)


def test_a_class_says_it_is_a_class_in_every_format_and_gives_no_verdict_on_versions() -> None:
    """A class says what kind of failure it was; its text, Markdown and JSON say so, where an entry of a cause gives
    its verdict on the installed release."""
    from ds_doctor.knowledge.triage import read_log
    from ds_doctor.reports.triage import CLASS_SAID, render_triage, render_triage_markdown

    (summary,) = read_log(SUMMARY, {"torch": "2.13.0"}).matches
    (oom,) = read_log(OOM, {"torch": "2.13.0"}).matches
    assert summary.to_dict()["class"] is True and oom.to_dict()["class"] is False
    text, markdown = render_triage([summary, oom]), render_triage_markdown([summary, oom])
    assert text.count(f"kind:     {CLASS_SAID}") == 1 and text.count("  affected: ") == 1
    assert markdown.count("- **kind:** a class of failures") == 1 and markdown.count("- **verdict:** ") == 1


def test_torch_compiles_guard_on_a_named_input_is_no_state_dict_load() -> None:
    """zp's 203: "tensor 'kwargs['input_ids']' size mismatch" (torch.compile's guard on an input, a recompile reason)
    was "possibly" a state dict that does not fit; "size mismatch" alone in a title still is."""
    assert "state_dict_load_mismatch" not in named(sample_text("2026-12-02zp", "203"))
    assert "state_dict_load_mismatch" not in named(
        "tensor 'L['x']' size mismatch at index 0. expected 4, actual 8"
    )
    assert "state_dict_load_mismatch" in named("size mismatch when loading the lora checkpoint")


def test_a_warning_that_a_segfault_could_follow_is_no_segfault() -> None:
    """zn's 301: pyarrow's warning at exit ("This could lead to a segmentation fault at exit") was named a native
    crash, certain."""
    assert "native_crash_segfault" not in named(sample_text("2026-12-02zn", "301"))
    assert "native_crash_segfault" in named("the job died: Segmentation fault (core dumped)")
    assert "native_crash_segfault" in named("running it leads to a segmentation fault on rank 3")


def test_a_warning_that_a_hang_may_come_is_no_hang() -> None:
    """l's 401: Accelerate's kernel warning ("this can cause the process to hang") above an AssertionError was named
    "possibly" a hang with no error."""
    assert "distributed_hang_no_error" not in named(sample_text("2026-11-30l", "401"))
    assert "distributed_hang_no_error" in named("the training process hangs after the first step on 2 nodes")


def test_a_progress_bar_goes_and_its_description_stays() -> None:
    """48zf's 301: a bar's description ("Converting format of dataset") is what a title saying the bar stops there
    names; the bar itself is noise. Without the description the stuck word is not a hang: no subject."""
    assert named(
        "Converting format of dataset (num_proc=15): 100%|██████████| 15/15 [00:00<00:00, 74.5 examples/s]卡住"
    ) == ["distributed_hang_no_error"]
    assert named("100%|██████████| 15/15 [00:00<00:00, 74.5 examples/s]卡住") == []


@pytest.mark.parametrize(
    ("sample", "number"),
    [("2026-12-01zl", "101"), ("2026-12-01zi", "303"), ("2026-11-30zf", "401"), ("2026-11-30r", "103")],
)
def test_a_weights_shape_check_naming_no_wrapper_is_possibly_either_placeholder(
    sample: str, number: str
) -> None:
    """torch's shape check of a weight ("'weight' must be 2-D", "weight should have at least three dimensions") as a
    bare title: ZeRO-3's empty placeholder and FSDP's flat shard both print it, so both are named as "possibly"."""
    found = {m.issue.id: m for m in triage(sample_text(sample, number), {})}
    both = {"ds_z3_module_run_outside_engine", "fsdp1_submodule_called_outside_root_forward"}
    assert both <= set(found)
    assert all(found[issue].possibly and found[issue].confirm for issue in both)


@pytest.mark.parametrize(
    ("sample", "number", "entry"),
    [
        ("2026-11-30u", "305", "ds_z3_module_run_outside_engine"),
        ("2026-11-30k", "204", "fsdp1_submodule_called_outside_root_forward"),
        ("2026-11-29b", "012", "fsdp1_submodule_called_outside_root_forward"),
    ],
)
def test_the_wrapper_a_text_names_decides_the_weights_shape_check(
    sample: str, number: str, entry: str
) -> None:
    """Where the text names ZeRO-3 or FSDP, that entry alone: the sibling's "possibly" gives way to the evidence."""
    assert named(sample_text(sample, number)) == [entry]


def test_a_number_said_to_be_stuck_is_a_plateau_not_a_hang() -> None:
    """zq's 308 made "fine-tuning ... hangs" a hang; a loss, a reward or a metric said to be stuck is a plateau, and
    the job hanging is still one."""
    for text in (
        "the fine-tuning loss is stuck at 2.3",
        "training reward stuck at 0",
        "DPO training accuracy stuck",
    ):
        assert "distributed_hang_no_error" not in named(text), text
    assert "distributed_hang_no_error" in named("Fine-tuning hangs when disconnect to the webui")
    assert "distributed_hang_no_error" in named("training is stuck at step 0 after the loss was logged")


def test_pending_is_a_hang_said_of_the_job_not_a_status_heading() -> None:
    """zr's 305 ("sft train code pending") is a hang said in words; ray status's "Pending:" heading, over a job that
    failed otherwise (zr's 405), and a pending request are not."""
    assert "distributed_hang_no_error" in named(sample_text("2026-12-02zr", "305"))
    assert "distributed_hang_no_error" not in named(sample_text("2026-12-02zr", "405"))
    assert "distributed_hang_no_error" not in named("Training job\nPending:\n (no pending nodes)")


def test_ranks_racing_on_a_checkpoint_path_and_what_only_looks_like_it() -> None:
    """transformers 4.36.0's rename on every rank is the race's entry; a FileExistsError said of several GPUs is
    "possibly" it; a FileExistsError alone (a cache folder two tools made, an earlier run's path) is not."""
    rename = "FileNotFoundError: [Errno 2] No such file or directory: '/o/tmp-checkpoint-950' -> '/o/checkpoint-950'"
    (match,) = triage(rename, {})
    assert match.issue.id == "checkpoint_path_race_across_ranks" and match.confirm is None
    (said,) = triage("create_checkpoint_symlink=True leads to FileExistsError when using >1 gpus", {})
    assert said.issue.id == "checkpoint_path_race_across_ranks" and said.kind == "paraphrase"
    alone = "FileExistsError: [Errno 17] File exists: '/root/.cache/huggingface/modules/datasets_modules'"
    assert "checkpoint_path_race_across_ranks" not in named(alone)
    assert "checkpoint_path_race_across_ranks" not in named(
        "FileExistsError when using the same output_dir twice"
    )

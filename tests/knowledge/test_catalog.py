"""The classifier on real error texts, and version verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from ds_doctor.knowledge import catalog as known_issues
from ds_doctor.knowledge.matching import classify
from ds_doctor.reports.model import Verdict

AFFECTED, NOT_AFFECTED, UNKNOWN = Verdict.AFFECTED, Verdict.NOT_AFFECTED, Verdict.UNKNOWN

RESOURCES = Path(__file__).resolve().parents[1] / "resources"
S2_ID = "ds_z3_offload_gradnorm_device_mismatch"


def test_the_s2_traceback_is_recognised() -> None:
    # The frames of DeepSpeed issue #5538 (LLaMA-Factory, ZeRO-3 + offload, deepspeed 0.14.2).
    text = (RESOURCES / "ds_5538_unscale_and_clip.txt").read_text()
    assert [issue.id for issue in classify(text)] == [S2_ID]


def test_a_generic_device_mismatch_without_zero3_frames_is_not_claimed() -> None:
    """Without ZeRO-3's frames the device check is the class (its causes ranked, no verdict), never the 0.14.1-0.14.2
    entry; with them, the entry, and the class gives way."""
    text = (
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cpu!"
    )
    assert [issue.id for issue in classify(text)] == ["device_mismatch_cpu_accelerator"]
    framed = (
        '  File "/x/deepspeed/runtime/zero/stage3.py", line 2117, in unscale_and_clip_grads\n'
        "    grad.mul_(1. / combined_scale)\n" + text
    )
    assert [issue.id for issue in classify(framed)] == ["ds_z3_offload_gradnorm_device_mismatch"]


@pytest.mark.parametrize(
    ("version", "verdict"),
    [
        ("0.14.0", NOT_AFFECTED),
        ("0.14.1", AFFECTED),
        ("0.14.2", AFFECTED),
        ("0.14.3", NOT_AFFECTED),
        ("0.19.8", NOT_AFFECTED),
        (None, UNKNOWN),
        ("not-a-version", UNKNOWN),
        ("0.14", UNKNOWN),  # "ds 0.14": a series the range's bounds split
        ("0.13", NOT_AFFECTED),
        ("0.19", NOT_AFFECTED),
    ],
)
def test_version_verdict_for_the_s2_issue(version, verdict) -> None:
    assert known_issues.get(S2_ID).version_verdict({"deepspeed": version}) == verdict


def test_a_series_against_a_wildcard_range_is_judged_without_raising() -> None:
    import dataclasses

    wildcard = dataclasses.replace(known_issues.get(S2_ID), affected="==0.14.*")
    assert wildcard.version_verdict({"deepspeed": "0.14"}) == UNKNOWN  # a series: said only where sure
    assert wildcard.version_verdict({"deepspeed": "0.14.2"}) == AFFECTED


def test_issues_without_a_version_range_give_unknown() -> None:
    assert known_issues.get("ds_jit_ninja_missing").version_verdict({"deepspeed": "0.19.8"}) == UNKNOWN


#: torchtitan #1224's lines (expert parallel, one GPU per rank, NCCL 2.26.5)
DUPLICATE_GPU_NCCL_2_26 = (
    "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, invalid "
    "usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.26.5\nncclInvalidUsage: This usually reflects "
    "invalid usage of NCCL library.\nLast error:\nDuplicate GPU detected : rank 0 and rank 1 both on CUDA device 6000"
)

SAMPLES = [
    # deepspeed 0.19.8's comm/torch.py on a deepspeed_shm_comm module another environment's DeepSpeed built into the
    # shared ~/.cache/torch_extensions (the frame as 0.19.8 prints it; the message is Python's)
    (
        '  File "/opt/venv/lib/python3.11/site-packages/deepspeed/comm/torch.py", line 223, in __init__\n'
        "    self.shm_vector_kernel_level = self.shm_comm_op.vector_kernel_level()\n"
        "AttributeError: module 'deepspeed_shm_comm' has no attribute 'vector_kernel_level'",
        "ds_op_module_from_another_build",
    ),
    # written from the threads of DeepSpeed #7830 and PEFT #1432 (the traceback's last frames and its message)
    (
        '  File "/usr/lib/python3.10/site-packages/deepspeed/runtime/zero/stage3.py", line 1182, in reduce_partition\n'
        "    grad_acc = param_tmp.grad_fn.next_functions[0][0]\n"
        "AttributeError: 'NoneType' object has no attribute 'next_functions'",
        "ds_z3_grad_checkpointing_next_functions",
    ),
    (
        '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/fsdp/_flat_param.py", line 771, in '
        '_validate_tensors_to_flatten\n    raise ValueError("Cannot flatten integer dtype tensors")\n'
        "ValueError: Cannot flatten integer dtype tensors",
        "fsdp_qlora_integer_storage_flatten",
    ),
    # the frames seen on an H100 image exporting TORCH_CUDA_ARCH_LIST=9.0a (docs/gpu-runs.md, 2026-11-23)
    (
        '  File "/tmp/site/deepspeed/ops/op_builder/builder.py", line 710, in compute_capability_args\n'
        "ValueError: invalid literal for int() with base 10: '0a'",
        "ds_cuda_arch_variant_suffix",
    ),
    (
        '  File ".../distributed_c10d.py", line 3434, in _tensor_to_object\n    buf = tensor.numpy().tobytes()'
        "[:tensor_size]\nRuntimeError: Numpy is not available",
        "torch_numpy_missing",
    ),
    (
        "deepspeed.runtime.zero.utils.ZeRORuntimeException: You are using ZeRO-Offload with a client provided "
        "optimizer (<class 'torch.optim.adamw.AdamW'>) which in most cases will yield poor performance.",
        "ds_offload_client_optimizer_rejected",
    ),
    ("RuntimeError: Ninja is required to load C++ extensions", "ds_jit_ninja_missing"),
    ("AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'", "ds_cpu_adam_build_failed"),
    (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
        "port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        "torchrun_port_in_use",
    ),
    (
        "exitcode  : -9 (pid: 4242)\n  traceback : Signal 9 (SIGKILL) received by PID 4242",
        "torchrun_child_sigkill",
    ),
    (
        "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
        "ds_fp16_loss_scale_at_minimum",
    ),
    # the texts below are quoted in the upstream threads each entry cites
    (
        "RuntimeError: Cannot free a ZeRO-3 parameter while it is still active in submodules. This can happen if: (1) "
        "submodules have not released the parameter",
        "ds_z3_free_param_still_active",
    ),
    (
        "AssertionError: {'id': 853, 'status': 'NOT_AVAILABLE', 'numel': 0, 'ds_numel': 0, 'shape': (0,), "
        "'active_sub_modules': set()}\n  assert param.ds_status == ZeroParamStatus.AVAILABLE, param.ds_summary()",
        "ds_z3_param_not_available_on_fetch",
    ),
    (
        "deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a DP world size of 8 but "
        "the current world size is 16. Automatic adjustment of ZeRO's optimizer state partitioning with a new world "
        "size is not currently supported.",
        "ds_ckpt_dp_world_size_changed",
    ),
    (
        "AttributeError: 'Linear' object has no attribute 'ds_grads_remaining'",
        "ds_z3_ds_grads_remaining_attr_missing",
    ),
    (
        "_pickle.UnpicklingError: Weights only load failed. ... WeightsUnpickler error: Unsupported global: GLOBAL "
        "deepspeed.runtime.fp16.loss_scaler.LossScaler was not an allowed global by default.",
        "ds_ckpt_torch26_weights_only",
    ),
    (
        "ValueError: `--mixed_precision` arg cannot be set to `bf16` when `fp16` is set in the DeepSpeed config file.",
        "acc_mixed_precision_conflicts_ds_config",
    ),
    (
        "AttributeError: 'AcceleratorState' object has no attribute 'fsdp_plugin'",
        "acc_fsdp_plugin_not_configured",
    ),
    (
        "ValueError: You can't train a model that has been loaded in 8-bit precision on a different device than the "
        "one you're training on.",
        "acc_quantized_model_wrong_device",
    ),
    (
        "ValueError: Please correct the following DeepSpeed config values that mismatch TrainingArguments values:\n"
        "- ds train_micro_batch_size_per_gpu=1 vs hf per_device_train_batch_size=8",
        "hf_trainer_ds_config_mismatch",
    ),
    (
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
        "failed. See inner exception for details.",
        "torchrun_rendezvous_unreachable",
    ),
    ("AttributeError: 'DummyOptim' object has no attribute 'step'", "acc_ds_placeholder_used_before_prepare"),
    (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
        "nccl_shm_system_error",
    ),
    ("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000", "nccl_duplicate_gpu"),
    (
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1) ran "
        "for 1800000 milliseconds before timing out.",
        "nccl_watchdog_timeout",
    ),
    (
        "[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Heartbeat monitor timed out! Process will be terminated "
        "after dumping debug info. workMetaList_.size()=12",
        "nccl_watchdog_heartbeat_stuck",
    ),
    (
        "Installed CUDA version 12.1 does not match the version torch was compiled with 11.8, unable to compile "
        "cuda/cpp extensions without a matching cuda version.",
        "ds_op_builder_cuda_mismatch",
    ),
    (
        '  File "/opt/venv/lib/python3.10/site-packages/torch/utils/file_baton.py", line 43, in wait\n'
        "    time.sleep(self.wait_seconds)\nKeyboardInterrupt",
        "ds_jit_build_stale_lock",
    ),
    (
        '  File "train.py", line 12, in <module>\n    state = pickle.load(f)\n'
        "ModuleNotFoundError: No module named 'numpy._core'",
        "numpy2_pickle_read_by_numpy1",
    ),
    (
        "ValueError: Must flatten tensors with uniform requires_grad when use_orig_params=False",
        "fsdp1_flatparam_mixed_requires_grad",
    ),
    (
        "ValueError: Must flatten tensors with uniform dtype but got torch.bfloat16 and torch.float32",
        "fsdp1_flatparam_mixed_dtype",
    ),
    (
        '  File "torch/distributed/fsdp/fully_sharded_data_parallel.py", line 849, in forward\n'
        "RuntimeError: 'weight' must be 2-D",
        "fsdp1_submodule_called_outside_root_forward",
    ),
    (
        "RuntimeError: aten.mul.Tensor: got mixed torch.Tensor and DTensor, need to convert all torch.Tensor "
        "to DTensor "
        "before calling distributed operators!",
        "fsdp2_mixed_tensor_dtensor",
    ),
    (
        "RuntimeError: ``sharded_state_dict`` can only be used when parameters are flatten and sharded.",
        "fsdp1_sharded_state_dict_with_no_shard",
    ),
    # the texts of the entries issue 24 added, as the threads they cite quote them
    (DUPLICATE_GPU_NCCL_2_26, "nccl_duplicate_gpu_subgroups_before_set_device"),
    (
        "[PG ID 0 PG GUID 0(default_pg) Rank 5] Process group watchdog thread terminated with exception: NCCL error: "
        "remote process exited or there was a network error, NCCL version 2.21.5\nncclRemoteError: A call failed "
        "possibly due to a network error or a remote process exiting prematurely.",
        "nccl_remote_error_peer_exited",
    ),
    (
        '  File "/opt/venv/lib/python3.10/site-packages/accelerate/accelerator.py", line 475, in distributed_type\n'
        "    return self.state.distributed_type\nAttributeError: 'AcceleratorState' object has no attribute "
        "'distributed_type'",
        "acc_state_attrs_missing_version_skew",
    ),
    # DeepSpeed's own launcher reports a killed rank from its sigkill_handler, not as torchrun does
    (
        "[2025-03-02 10:11:12,345] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py', "
        "'--local_rank=3'] exits with return code = -9",
        "torchrun_child_sigkill",
    ),
    # a resume with prodigy-plus-schedule-free <1.9.2 on a GPU: the first step fails inside the optimizer
    (
        '  File "/opt/venv/lib/python3.10/site-packages/prodigyplus/core_optimiser.py", line 403, in step\n'
        "    d_numerator.add_(d_update)\nRuntimeError: Expected all tensors to be on the same device, but found at "
        "least two devices, cuda:0 and cpu!",
        "prodigy_group_tensors_left_on_cpu",
    ),
    # loading a ZeRO 0/1 checkpoint that was saved from meta placeholders
    (
        '  File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 2870, in '
        "load_module_state_dict"
        "\n    self.module.load_state_dict(checkpoint[self._choose_module_key(checkpoint)], "
        "strict=strict)\nRuntimeError: "
        'Error(s) in loading state_dict for GPT2LMHeadModel:\n\tWhile copying the parameter named "lm_head.weight", '
        "an exception occurred : ('Cannot copy out of meta tensor; no data!',).",
        "ds_ckpt_meta_params_saved",
    ),
]


@pytest.mark.parametrize(("text", "issue_id"), SAMPLES)
def test_other_entries_match_their_upstream_texts(text, issue_id) -> None:
    assert issue_id in [issue.id for issue in classify(text)]


def test_every_entry_has_a_remedy_and_references() -> None:
    for issue in known_issues.ISSUES:
        assert issue.remedy and issue.refs, issue.id
        # a silent issue has no error text to match: an invariant must be what finds it, and it says why it is silent
        assert issue.patterns or issue.invariants, issue.id
        assert bool(issue.patterns) != bool(issue.silent), issue.id
        assert all(
            ref.startswith(("https://github.com/", "https://pytorch.org/docs/")) for ref in issue.refs
        ), issue.id


def test_the_catalog_holds_every_library_file_once() -> None:
    from ds_doctor.knowledge.load import data_files, load_file

    parts = {path.name: load_file(path) for path in data_files()}
    assert list(parts) == [
        "deepspeed.toml",
        "accelerate.toml",
        "fsdp.toml",
        "launch.toml",
        "equivalence.toml",
        "reported.toml",
        "field_deepspeed.toml",
        "field_hf.toml",
        "field_trainers.toml",
        "field_distributed.toml",
        "everyday.toml",
    ]
    everything = sum(parts.values(), ())
    assert known_issues.ISSUES == everything and len({i.id for i in everything}) == len(everything) >= 200
    assert all(issue.id.startswith("ds_") for issue in parts["deepspeed.toml"])
    assert known_issues.get("torchrun_child_sigkill").package == "torch"


def test_every_entry_with_a_signature_is_exercised_by_a_sample() -> None:
    """Each entry classify() can return matches a sample above, the #5538 traceback, a captured probe trace or a
    reproduction's output, or else the wordings its releases print (test_wording.py holds it to each)."""
    texts = [text for text, _ in SAMPLES] + [p.read_text() for p in RESOURCES.glob("**/*.txt")]
    unsampled = [
        i.id
        for i in known_issues.ISSUES
        if i.patterns and not i.wordings and not any(i.matches(t) for t in texts)
    ]
    assert unsampled == []


@pytest.mark.parametrize(
    ("name", "issue_id", "package", "affected", "fixed"),
    [
        ("h100_ds_5538_live.txt", S2_ID, "deepspeed", "0.14.2", "0.19.8"),
        (
            "h100_ds0142_torch211_import.txt",
            "ds_import_torch_private_removed",
            "deepspeed",
            "0.14.2",
            "0.19.8",
        ),
        ("h100_ds0142_numpy2_import.txt", "ds_import_numpy2_bufsize", "deepspeed", "0.14.2", "0.19.8"),
        (
            "h200_composer0235_two_groups_keyerror.txt",
            "composer_group_subset_keyerror",
            "mosaicml",
            "0.23.5",
            "0.24.0",
        ),
    ],
)
def test_tracebacks_captured_on_a_gpu_node_are_classified(
    name: str, issue_id: str, package: str, affected: str, fixed: str
) -> None:
    """Real tracebacks captured on GPU nodes (docs/gpu-runs.md): zero_offload with deepspeed 0.14.2 on an H100 (#5538
    live, and the two import failures an old DeepSpeed meets on torch 2.11 / numpy 2 before it gets that far), and
    Composer 0.23.5's two-group route on an H200, as the report rendered them."""
    hits = classify((RESOURCES / "gpu" / name).read_text())
    assert [hit.id for hit in hits] == [issue_id]
    verdict = hits[0].version_verdict
    assert (verdict({package: affected}), verdict({package: fixed})) == (AFFECTED, NOT_AFFECTED)


#: texts whose message looks like an entry's but whose cause is another: the entry's frames tell them apart
LOOK_ALIKES = [
    # an autograd walk in the user's own code, no DeepSpeed on the stack
    (
        '  File "train.py", line 88, in walk_graph\n    for fn, _ in node.grad_fn.next_functions:\n'
        "AttributeError: 'NoneType' object has no attribute 'next_functions'"
    ),
    # DeepSpeed's warning that DS_SKIP_CUDA_CHECK=1 lets a mismatched CUDA through (op_builder/builder.py, 0.9.5 on):
    # no refusal, nothing to fix
    (
        "[WARNING] DeepSpeed Op Builder: Installed CUDA version 12.4 does not match the version torch was "
        "compiled with "
        "12.1.Detected `DS_SKIP_CUDA_CHECK=1`: Allowing this combination of CUDA, but it may result in unexpected "
        "behavior."
    ),
]


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_a_look_alike_is_not_named(text: str) -> None:
    assert classify(text) == []


@pytest.mark.parametrize(
    ("nccl", "verdict"),
    [("2.26.5", AFFECTED), ("2.27.3", AFFECTED), ("2.21.5", NOT_AFFECTED), (None, UNKNOWN)],
)
def test_the_duplicate_gpu_variant_is_judged_on_the_nccl_version(nccl: str | None, verdict: Verdict) -> None:
    """One text, two entries: the classic two-ranks-one-GPU (every NCCL) and the sub-group one NCCL 2.26 brought,
    the latter judged on the NCCL version (from the log's "NCCL version 2.26.5" in triage)."""
    hits = {issue.id: issue for issue in classify(DUPLICATE_GPU_NCCL_2_26)}
    assert set(hits) == {"nccl_duplicate_gpu", "nccl_duplicate_gpu_subgroups_before_set_device"}
    assert hits["nccl_duplicate_gpu_subgroups_before_set_device"].version_verdict({"nccl": nccl}) == verdict
    assert hits["nccl_duplicate_gpu"].version_verdict({"nccl": nccl}) == UNKNOWN


def test_a_rank_and_the_matcher_import_without_reading_the_catalog() -> None:
    """Every rank imports the plugins (and through them the matcher): reading and checking the catalog's files there
    cost each rank of each launch about 0.4 s of CPU, and a rank classifies nothing on a healthy run."""
    import subprocess
    import sys

    probe = (
        "import ds_doctor.plugins, ds_doctor.knowledge.matching\n"
        "from ds_doctor.knowledge import catalog\n"
        "print(catalog._catalog.cache_info().currsize)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["0"], out.stdout + out.stderr

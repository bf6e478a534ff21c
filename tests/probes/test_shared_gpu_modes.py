"""What a probe refuses in one of the shared-GPU modes, seen on a GPU node: FSDP2 over gloo with CUDA tensors
killed rank 0 by SIGSEGV in its first backward on the H200 (docs/gpu-runs.md, 2026-11-26; pytorch/pytorch#132471).
The probes skip it there with the mode that runs it, and run it everywhere else."""

from __future__ import annotations

import pytest

from ds_doctor.plugins import ProbeContext, SkipCase
from ds_doctor.probes.shared.common import refuse_fsdp2_over_gloo_on_gpu


def context(device: str, backend: str) -> ProbeContext:
    return ProbeContext(
        case_id="equivalence[fsdp2-ws2]",
        params=None,
        rank=0,
        world_size=2,
        local_rank=0,
        device=device,
        backend=backend,
    )


def test_fsdp2_over_gloo_on_a_gpu_is_a_skip_that_names_the_mode_that_runs_it() -> None:
    with pytest.raises(SkipCase, match=r"pytorch/pytorch#132471.*DS_DOCTOR_SHARED_GPU=nccl-hostid"):
        refuse_fsdp2_over_gloo_on_gpu(context("cuda:0", "gloo"))


@pytest.mark.parametrize(("device", "backend"), [("cpu", "gloo"), ("cuda:0", "nccl")])
def test_fsdp2_runs_over_gloo_on_the_cpu_and_over_nccl_on_a_gpu(device: str, backend: str) -> None:
    refuse_fsdp2_over_gloo_on_gpu(context(device, backend))  # returns: nothing to refuse

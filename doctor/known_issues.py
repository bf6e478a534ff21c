"""Known upstream issues: signatures, affected versions, remedies, references, and one classifier.

Entries are written from the upstream threads (see shared/KNOWN_ISSUES.md for the raw notes);
version ranges are PEP 440 specifiers on the named distribution. `classify` matches any error
text (message, traceback, stderr tail) against every entry.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

AFFECTED = "affected"
NOT_AFFECTED = "not_affected"
UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True)
class KnownIssue:
    id: str
    title: str
    package: str  # distribution whose version decides the verdict
    patterns: tuple[str, ...]  # any one matching the error text is a hit...
    cause: str
    remedy: str
    refs: tuple[str, ...]
    requires: tuple[str, ...] = ()  # ...provided all of these match too (frames that disambiguate)
    affected: str = ""  # PEP 440 specifier; "" = every version (environmental or by design)
    fixed_in: str | None = None
    families: tuple[str, ...] = ()
    invariants: tuple[str, ...] = ()  # invariants whose error findings show this issue

    def matches(self, text: str) -> bool:
        flags = re.MULTILINE | re.DOTALL
        if not any(re.search(p, text, flags) for p in self.patterns):
            return False
        return all(re.search(p, text, flags) for p in self.requires)

    def version_verdict(self, versions: Mapping[str, str | None]) -> str:
        """affected / not_affected by the installed version; unknown where it cannot tell."""
        installed = versions.get(self.package)
        if not installed or not self.affected:
            return UNKNOWN
        try:
            version = Version(installed)
            return AFFECTED if SpecifierSet(self.affected).contains(version, prereleases=True) else NOT_AFFECTED
        except (InvalidVersion, InvalidSpecifier):
            return UNKNOWN

    def to_ref(self, verdict: str) -> dict[str, object]:
        """The `known_issue` object of a case result."""
        return {
            "id": self.id,
            "title": self.title,
            "verdict": verdict,
            "affected_versions": f"{self.package} {self.affected}" if self.affected else f"{self.package} (any)",
            "fixed_in": self.fixed_in,
            "remedy": self.remedy,
            "refs": list(self.refs),
        }


_DS = "deepspeed"

ISSUES: tuple[KnownIssue, ...] = (
    KnownIssue(
        id="ds_z3_offload_gradnorm_device_mismatch",
        title="ZeRO-3 + optimizer offload: grad norm on the GPU, gradients on the CPU in unscale_and_clip_grads",
        package=_DS,
        patterns=(r"Expected all tensors to be on the same device, but found at least two devices, "
                  r"(cuda|xpu|npu|hpu)(:\d+)? and cpu",
                  r"Expected all tensors to be on the same device, but found at least two devices, cpu and (cuda|xpu|npu|hpu)"),
        requires=(r"stage3\.py.*(unscale_and_clip_grads|step)|unscale_and_clip_grads",),
        cause="DeepSpeed 0.14.1-0.14.2 computed the scaled global grad norm as a 0-dim accelerator tensor "
        "(PR #5256) and multiplied it into fp32 gradients that optimizer offload keeps on the CPU.",
        remedy="Upgrade DeepSpeed to >= 0.14.3 (the change was reverted in #5461 and fixed in #5493), or pin 0.14.0. "
        "Stop-gap from the thread: patch `grad.mul_(1. / combined_scale.item())`, or offload only parameters.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/5538", "https://github.com/deepspeedai/DeepSpeed/issues/5422",
              "https://github.com/deepspeedai/DeepSpeed/issues/5469", "https://github.com/deepspeedai/DeepSpeed/pull/5461",
              "https://github.com/deepspeedai/DeepSpeed/pull/5493"),
        affected=">=0.14.1,<0.14.3",
        fixed_in="0.14.3",
        families=("zero_offload",),
        invariants=("clip_norm_device",),
    ),
    KnownIssue(
        id="ds_offload_client_optimizer_rejected",
        title="ZeRO-Offload refuses a client optimizer that is not DeepSpeedCPUAdam",
        package=_DS,
        patterns=(r"You are using ZeRO-Offload with a client provided optimizer",),
        cause="offload_optimizer is on and the optimizer passed to deepspeed.initialize (directly, through the HF "
        "Trainer or Accelerate) is not a DeepSpeed CPU optimizer; the check exists since 0.8.3 (PR #2971).",
        remedy="Declare the optimizer in the DeepSpeed config, or pass deepspeed.ops.adam.DeepSpeedCPUAdam, or set "
        'top-level "zero_force_ds_cpu_optimizer": false if you accept the slowdown.',
        refs=("https://github.com/deepspeedai/DeepSpeed/pull/2971", "https://github.com/deepspeedai/DeepSpeed/issues/7524"),
        affected=">=0.8.3",
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_cpu_adam_build_failed",
        title="DeepSpeedCPUAdam has no ds_opt_adam: the cpu_adam op failed to build or load",
        package=_DS,
        patterns=(r"'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'",),
        cause="A secondary error from DeepSpeedCPUAdam.__del__: CPUAdamBuilder().load() raised first (compiler, "
        "CUDA mismatch, ninja), so the op handle was never set. The first exception above it is the real one.",
        remedy="Read the first exception in the log; pre-build the op (DS_BUILD_CPU_ADAM=1 pip install deepspeed) or "
        "clear ~/.cache/torch_extensions/<py_cu>/cpu_adam and rebuild.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/1077", "https://github.com/deepspeedai/DeepSpeed/issues/1846"),
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_op_builder_cuda_mismatch",
        title="DeepSpeed op builder: system CUDA does not match torch's CUDA",
        package=_DS,
        patterns=(r"Installed CUDA version \S+ does not match the version torch was compiled with \S+"
                  r"(?!.*accepting this combination)",
                  r"CUDA_HOME does not exist, unable to compile CUDA op"),
        cause="The nvcc under CUDA_HOME has another CUDA major version than the torch wheel, so DeepSpeed refuses "
        "to JIT-compile its ops.",
        remedy="Install a CUDA toolkit matching torch's CUDA major (or a matching torch) and point CUDA_HOME at it; "
        "DS_SKIP_CUDA_CHECK=1 skips the check at your own risk.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/3223", "https://github.com/deepspeedai/DeepSpeed/pull/3436"),
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_jit_ninja_missing",
        title="Ninja is required to JIT-build DeepSpeed ops",
        package=_DS,
        patterns=(r"Ninja is required to load C\+\+ extensions",),
        cause="The ninja executable is not on the PATH of the process that compiles the op (not installed, or a "
        "venv whose bin/ is not on the launched ranks' PATH).",
        remedy="pip install ninja in the training environment and make sure its bin/ is on PATH for every rank "
        "(check `ninja --version; echo $?`), or pre-build the ops at install time.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/1687",),
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_jit_build_stale_lock",
        title="DeepSpeed op build waits forever on a stale torch_extensions lock",
        package="torch",
        patterns=(r"file_baton\.py.*wait",),
        cause="An earlier compile was killed and left a `lock` file in ~/.cache/torch_extensions/<py_cu>/<op>; "
        "later builds spin on it.",
        remedy="Delete the stale lock (or the op's cache directory) and rerun; give concurrent jobs their own "
        "TORCH_EXTENSIONS_DIR.",
        refs=("https://github.com/pytorch/pytorch/issues/189245", "https://github.com/huggingface/transformers/issues/12715"),
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_fp16_loss_scale_at_minimum",
        title="fp16 loss scale already at minimum",
        package=_DS,
        patterns=(r"Current loss scale already at minimum - cannot decrease scale anymore",),
        cause="fp16 gradients overflow on every step, so the dynamic loss scaler halves down to min_loss_scale.",
        remedy="Use bf16 where the hardware has it; otherwise tune the fp16 block (lower initial_scale_power, or a "
        "fixed loss_scale); overflow from step 1 usually means a data or model problem.",
        refs=("https://github.com/deepspeedai/DeepSpeed/issues/2273", "https://github.com/deepspeedai/DeepSpeedExamples/issues/418"),
        families=("zero_offload",),
    ),
    KnownIssue(
        id="ds_ckpt_torch26_weights_only",
        title="torch >= 2.6 weights_only load refuses DeepSpeed checkpoint objects",
        package=_DS,
        patterns=(r"Weights only load failed",),
        requires=(r"Unsupported global: GLOBAL deepspeed\.",),
        cause="torch 2.6 made weights_only=True the default of torch.load; DeepSpeed checkpoints pickle DeepSpeed "
        "objects (loss scaler, ZeroStageEnum).",
        remedy="Upgrade DeepSpeed to >= 0.16 (PR #6751 passes weights_only explicitly) and the wrapper that loads; "
        "for trusted files pass weights_only=False or add_safe_globals.",
        refs=("https://github.com/deepspeedai/DeepSpeed/pull/6751", "https://github.com/deepspeedai/DeepSpeed/issues/8500"),
        affected="<0.16.0",
        fixed_in="0.16.0",
    ),
    KnownIssue(
        id="torchrun_port_in_use",
        title="Rendezvous port already in use",
        package="torch",
        patterns=(r"server socket has failed to (listen on any local network address|bind to)"
                  r".*(EADDRINUSE|Address already in use)",),
        cause="Another process on the host already holds the master/rendezvous port (torchrun's default is 29500).",
        remedy="Pick a free --master-port, or --rdzv-endpoint localhost:0 on a single node; kill stale processes.",
        refs=("https://github.com/pytorch/pytorch/issues/73320",),
    ),
    KnownIssue(
        id="nccl_shm_system_error",
        title="NCCL unhandled system error (usually /dev/shm too small)",
        package="torch",
        patterns=(r"unhandled system error",),
        requires=(r"NCCL",),
        cause="NCCL could not create its shared-memory segment (containers default /dev/shm to 64 MB) or another "
        "system call failed.",
        remedy="Run the container with --shm-size=1g or --ipc=host; NCCL_DEBUG=INFO shows the failing call; "
        "NCCL_SHM_DISABLE=1 as a slow fallback.",
        refs=("https://github.com/NVIDIA/nccl/issues/342", "https://github.com/pytorch/pytorch/issues/37004"),
    ),
    KnownIssue(
        id="nccl_duplicate_gpu",
        title="NCCL: two ranks on one GPU",
        package="torch",
        patterns=(r"Duplicate GPU detected : rank \d+ and rank \d+ both on CUDA device",),
        cause="Two ranks use the same physical GPU: no torch.cuda.set_device(LOCAL_RANK), more ranks than GPUs, or "
        "CUDA_VISIBLE_DEVICES changed after CUDA was initialised.",
        remedy="torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before init_process_group; keep ranks <= GPUs.",
        refs=("https://github.com/pytorch/pytorch/issues/129385",),
    ),
    KnownIssue(
        id="nccl_watchdog_timeout",
        title="NCCL watchdog: collective timed out",
        package="torch",
        patterns=(r"Watchdog caught collective operation timeout",),
        cause="A rank did not enter or finish the same collective within the process-group timeout (slow rank-local "
        "work, mismatched collectives, or a hung peer).",
        remedy="Find the rank that did not arrive (compare OpType/NumelIn across ranks); move rank-local work out of "
        "the distributed section; raise the timeout only when the work is legitimately slow.",
        refs=("https://github.com/pytorch/pytorch/issues/97191",),
    ),
    KnownIssue(
        id="torchrun_child_sigkill",
        title="A rank was SIGKILLed (usually the host OOM killer)",
        package="torch",
        patterns=(r"exitcode\s*:\s*-9\b", r"Signal 9 \(SIGKILL\)", r"\bSIGKILL\b"),
        cause="The worker was killed from outside, most often by the kernel OOM killer when every rank materialises "
        "the model in host RAM.",
        remedy="Check dmesg / the cgroup's OOM events; reduce host memory per rank (RAM-efficient loading, fewer "
        "dataloader workers).",
        refs=("https://github.com/meta-pytorch/torchtune/issues/1710",),
    ),
)

_BY_ID = {issue.id: issue for issue in ISSUES}
if len(_BY_ID) != len(ISSUES):  # pragma: no cover - guards the table above
    raise RuntimeError("duplicate known-issue id")


def get(issue_id: str) -> KnownIssue:
    return _BY_ID[issue_id]


def classify(text: str, issues: Iterable[KnownIssue] = ISSUES) -> list[KnownIssue]:
    """Known issues whose signature matches an error text, most specific (most patterns required) first."""
    hits = [issue for issue in issues if text and issue.matches(text)]
    return sorted(hits, key=lambda issue: -len(issue.requires))

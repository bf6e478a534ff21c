"""What real architectures bring to a device map, as invariants: buffers (rotary `inv_freq`, causal masks, running
statistics) and tied weights (an LM head sharing the input embedding).

- `buffer_placement`: every buffer sits on the device the model computes on. A buffer left on the CPU or on
  `meta` is the classic failure of meta-device init, ZeRO-3 `zero.Init` and `dispatch_model`: the forward then
  fails with a device mismatch, or, on `meta`, computes nothing at all.
- `ties_kept`: parameters that were one tensor under several names before a step (wrapping, dispatch, load,
  resume) are still one tensor after it. An untied head trains apart from its embedding and is saved twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ds_doctor.reports.model import Finding, Severity, TensorRecord


def same_device(device: str, expected: str) -> bool:
    kind, _, index = device.partition(":")
    want_kind, _, want_index = expected.partition(":")
    return kind == want_kind and (not index or not want_index or index == want_index)


def buffer_placement(records: Iterable[TensorRecord], device: str, stage: str) -> list[Finding]:
    """An error per buffer at `stage` that is not on `device` (the model's compute device)."""
    findings = []
    for record in records:
        if record.role != "buffer" or record.stage != stage or same_device(record.device, device):
            continue
        where = "on meta: it holds no data" if record.device == "meta" else f"on {record.device}"
        findings.append(
            Finding(
                "buffer_placement",
                Severity.ERROR,
                f"buffer {record.path} of {record.owner or 'the root module'} is {where} after {stage}, "
                f"while the model "
                f"computes on {device}",
                rank=record.rank,
                stage=stage,
                expected=f"every buffer on {device}",
                evidence=(record,),
                remedy="materialise buffers with the module (to_empty(device=...) then re-run the module's init for "
                "non-persistent buffers such as rotary inv_freq, or keep them out of zero.Init/meta init), and "
                "move the whole module, buffers included, before wrapping",
            )
        )
    return findings


def ties_kept(records: Iterable[TensorRecord], before: str, after: str) -> list[Finding]:
    """An error per group of tied names at `before` that are no longer one tensor at `after`, per rank."""
    by_stage: dict[tuple[int, str], list[TensorRecord]] = {}
    for record in records:
        if record.role == "param" and record.stage in (before, after):
            by_stage.setdefault((record.rank, record.stage), []).append(record)
    findings = []
    for (rank, stage), tied in sorted(by_stage.items()):
        if stage != before:
            continue
        later = {name: r for r in by_stage.get((rank, after), []) for name in r.names}
        for record in (r for r in tied if r.aliases):
            holders = {id(later[name]): later[name] for name in record.names if name in later}
            if len(holders) > 1:
                findings.append(
                    Finding(
                        "ties_kept",
                        Severity.ERROR,
                        f"{' and '.join(record.names)} were one tied tensor at {before} and are {len(holders)} tensors "
                        f"at {after}: they now train apart and are saved twice",
                        rank=rank,
                        stage=after,
                        expected="tied parameters stay one tensor",
                        evidence=(record, *holders.values()),
                        remedy="re-tie after whatever replaced one of them (model.tie_weights() for transformers "
                        "models), and never assign a copy to a tied parameter after wrapping",
                    )
                )
    return findings


#: The per-module state ZeRO-3 attaches to every module it hooks (deepspeed/runtime/zero/parameter_offload.py).
ZERO3_HOOK_STATE = ("pre_bwd_fn", "post_bwd_fn")


def zero3_hooks_own_state(module: Any, rank: int | None = None, stage: str = "after_init") -> list[Finding]:
    """Every module ZeRO-3 hooked holds its own backward-hook state. A wrapper that delegates attribute lookups to
    a child (PEFT's modules_to_save) otherwise reads the child's, and its hooks count on a module whose forward
    never ran: `'Linear' object has no attribute 'ds_grads_remaining'` (DeepSpeed #7203, fixed in 0.19.3)."""
    findings = []
    for name, sub in module.named_modules():
        borrowed = [attr for attr in ZERO3_HOOK_STATE if attr not in vars(sub) and hasattr(sub, attr)]
        if borrowed and any(attr in vars(other) for other in sub.modules() for attr in borrowed):
            findings.append(
                Finding(
                    "zero3_hooks_own_state",
                    Severity.ERROR,
                    f"{name or '<root>'} ({type(sub).__name__}) has no ZeRO-3 hook state of its own: "
                    f"{', '.join(borrowed)} reach it from a child through attribute delegation",
                    rank=rank,
                    stage=stage,
                    expected="each hooked module's pre_bwd_fn/post_bwd_fn in its own __dict__",
                    remedy="Upgrade DeepSpeed to >= 0.19.3 (PR #8144), or do not delegate these names to the child.",
                )
            )
    return findings

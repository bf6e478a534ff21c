"""Replicas that drift apart: at a watched step (the first, then every `every`), the data-parallel replicas of the
model must hold the same weights, bit for bit. Each rank digests its parameters and the digests are gathered; a
rank whose digest of a parameter differs from the others' is named, with the parameters (Megatron checks a weight
hash across its data-parallel replicas the same way; BLOOM-176B's replicas drifted apart for days unseen).

The digest of a parameter is the integer sum of its elements' bit patterns (the tensor viewed as integers of its
width, summed in int64): exact, so one flipped bit changes it, and independent of the order of the summation, so
the same bits give the same digest on every rank and every device. It reads each parameter once (one reduction per
tensor, one tensor of digests gathered): the cost is in bench/bench_digest.py.

Compared only where the ranks hold whole replicas: plain DDP and Accelerate, DeepSpeed ZeRO-1/2 (whose module
parameters are replicated; their fp32 partitions are not), and only when every rank is a data-parallel replica
(DeepSpeed's dp_world_size is the world size). ZeRO-3 and FSDP shard the parameters: nothing to compare there; a
DeepSpeed MoE expert (`allreduce = False`) lives on its expert-parallel ranks only and is left out.
"""

from __future__ import annotations

from typing import Any

from ds_doctor.reports.model import Finding, Severity

#: integer views of each float width (the bits, summed exactly)
_INT_OF_WIDTH = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}
NAMED = 5  # parameters named in a finding


def replicated(target: Any, world_size: int) -> bool:
    """Whether every rank holds a whole replica of the module's parameters."""
    engine = target.engine
    if engine is not None:
        stage = engine.zero_optimization_stage() if hasattr(engine, "zero_optimization_stage") else 0
        dp = getattr(engine, "dp_world_size", world_size)
        return stage < 3 and dp == world_size
    module = target.module
    if any(type(m).__name__ in ("FullyShardedDataParallel", "FSDPModule") for m in module.modules()):
        return False
    return not any(type(p).__name__ == "DTensor" or hasattr(p, "ds_id") for p in module.parameters())


def digests(named: list[tuple[str, Any]], device: Any) -> Any:
    """One int64 per parameter: the sum of its elements' bit patterns."""
    import torch

    sums = []
    for _, param in named:
        data = param.detach()
        width = data.element_size()
        bits = (
            data.contiguous().view(getattr(torch, _INT_OF_WIDTH[width])) if width in _INT_OF_WIDTH else data
        )
        sums.append(bits.sum(dtype=torch.int64).to(device))
    return torch.stack(sums) if sums else torch.zeros(0, dtype=torch.int64, device=device)


def _finding(label: str, rank: int | None, who: str, differ: list[str]) -> Finding:
    shown = ", ".join(differ[:NAMED]) + (f" and {len(differ) - NAMED} more" if len(differ) > NAMED else "")
    return Finding(
        invariant="replicas_agree",
        severity=Severity.ERROR,
        rank=rank,
        stage=label,
        message=f"{label}: {who} in {len(differ)} parameter(s): {shown} (bitwise digest after the step)",
        expected="every data-parallel replica holds the same weights after every step",
        data={"rank": rank, "parameters": differ[:50], "count": len(differ)},
    )


def drifted(names: list[str], gathered: list[list[int]], label: str) -> list[Finding]:
    """Where a strict majority of ranks agree on a parameter, each rank that differs from it, with its parameters;
    where none does (two ranks that disagree: no one to say which is right), the parameters the replicas split on."""
    outliers: dict[int, list[str]] = {}
    split: list[str] = []
    for index, name in enumerate(names):
        column = [row[index] for row in gathered]
        values = set(column)
        if len(values) == 1:
            continue
        majority = max(values, key=column.count)
        if column.count(majority) * 2 > len(column):
            for rank, value in enumerate(column):
                if value != majority:
                    outliers.setdefault(rank, []).append(name)
        else:
            split.append(name)
    findings = [
        _finding(label, rank, f"rank {rank}'s replica differs from the other data-parallel replicas'", differ)
        for rank, differ in sorted(outliers.items())
    ]
    if split:
        ranks = ", ".join(str(rank) for rank in range(len(gathered)))
        who = f"the data-parallel replicas of ranks {ranks} disagree, no majority to say which is right,"
        findings.append(_finding(label, None, who, split))
    return findings


def check(target: Any, rank: int, label: str) -> list[Finding]:
    """Every rank's digests gathered (one tensor all_gather, every rank must call it); the findings on rank 0."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return []
    size = dist.get_world_size()
    if not replicated(target, size):
        return []
    import torch

    # DeepSpeed's MoE experts (`allreduce = False`) live on their expert-parallel ranks only: not replicas
    named = [
        (n, p)
        for n, p in target.module.named_parameters()
        if p.device.type != "meta" and getattr(p, "allreduce", True) is not False
    ]
    device = torch.device(target.device) if dist.get_backend() == "nccl" else torch.device("cpu")
    counts = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(size)]
    dist.all_gather(counts, torch.tensor([len(named)], dtype=torch.int64, device=device))
    if (
        len({int(c) for c in counts}) > 1
    ):  # not replicas of one model: nothing to compare, and no ragged gather
        return []
    mine = digests(named, device)
    parts = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(parts, mine)
    if rank != 0:
        return []
    return drifted([n for n, _ in named], [part.cpu().tolist() for part in parts], label)

"""Consistency across the ranks of a job: every key of every rank's fingerprint (`ds_doctor.collect.fingerprint`)
has one value, or the outliers are named with their node, host and ranks beside the majority value.

Versions, builds, the driver and the GPU model are errors (a job built against them crashes or hangs); other
keys are warnings. Keys that differ per rank or node by design are not compared."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from ds_doctor.reports.model import Finding, Severity

UNSET = "<unset>"
#: Keys that legitimately differ per rank or node: where a fingerprint was taken, and the launcher's own.
NOT_COMPARED = frozenset(
    {
        "rank",
        "node",
        "host",
        "env:RANK",
        "env:LOCAL_RANK",
        "env:GROUP_RANK",
        "env:ROLE_RANK",
        "env:NODE_RANK",
        "env:CUDA_VISIBLE_DEVICES",
        "env:TORCHELASTIC_ERROR_FILE",
        "env:SLURM_PROCID",
        "env:SLURM_NODEID",
        "env:SLURM_LOCALID",
        "env:HOSTNAME",
        "env:TORCH_FR_DUMP_TEMP_FILE",  # ds-doctor's own: each node's launch directory, where NCCL's recorder dumps
    }
)
STRICT = ("python", "package:", "torch.", "driver", "cuda_driver", "gpu.name", "gpu.compute_capability")


def _span(ranks: list[int]) -> str:
    """0,1,2,5 -> 0-2,5"""
    runs = [[ranks[0], ranks[0]]]
    for rank in ranks[1:]:
        if rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _first_node(prints: Sequence[Mapping[str, str]], ranks: list[int]) -> int:
    """The lowest node holding a value: on a tie the majority is node 0's (torchrun's rendezvous, not the nodes'
    ranks, decides which node gets the low global ranks)."""
    nodes = [int(prints[r].get("node", "")) for r in ranks if prints[r].get("node", "").isdigit()]
    return min(nodes) if nodes else min(ranks)


def where(prints: list[Mapping[str, str]], ranks: Iterable[int]) -> str:
    """`node 1 (host-b, ranks 4-7)`, a node at a time."""
    by_node: dict[tuple[str, str], list[int]] = {}
    for rank in sorted(ranks):
        fp = prints[rank]
        by_node.setdefault((fp.get("node", "None"), fp.get("host", "?")), []).append(rank)
    return "; ".join(
        (f"node {node} " if node != "None" else "") + f"({host}, ranks {_span(rs)})"
        for (node, host), rs in by_node.items()
    )


@dataclasses.dataclass(frozen=True)
class Disagreement:
    """One key whose value differs across fingerprints: each value with the fingerprints (indices) holding it."""

    key: str
    majority: str
    by_value: dict[str, list[int]]

    @property
    def severity(self) -> Severity:
        return Severity.ERROR if self.key.startswith(STRICT) else Severity.WARNING

    def outliers(self) -> dict[str, list[int]]:
        return {value: ranks for value, ranks in self.by_value.items() if value != self.majority}


def disagreements(prints: Sequence[Mapping[str, str]]) -> list[Disagreement]:
    """Every key whose value differs across `prints`, with the majority value (a tie goes to the lowest node). The
    rule set both sources share: the ranks of a live job (`compare`) and the reports of a fleet (`ds-doctor fleet`)."""
    keys = sorted({key for fp in prints for key in fp} - NOT_COMPARED)
    found = []
    for key in keys:
        by_value: dict[str, list[int]] = {}
        for rank, fp in enumerate(prints):
            by_value.setdefault(fp.get(key, UNSET), []).append(rank)
        if len(by_value) > 1:
            majority = max(
                by_value, key=lambda value: (len(by_value[value]), -_first_node(prints, by_value[value]))
            )
            found.append(Disagreement(key, majority, by_value))
    return found


def compare(prints: list[Mapping[str, str]]) -> list[Finding]:
    """One finding per key whose value differs across ranks (`prints[r]` is rank r's fingerprint)."""
    findings = []
    for split in disagreements(prints):
        outliers = "; ".join(
            f"{value!r} on {where(prints, ranks)}" for value, ranks in split.outliers().items()
        )
        findings.append(
            Finding(
                "consistency",
                split.severity,
                f"{split.key} differs across the ranks: {outliers} "
                f"(the other {len(split.by_value[split.majority])} rank(s) have {split.majority!r})",
                stage="fingerprint",
                expected=f"{split.key} = {split.majority!r} on every rank",
                remedy="make every node's environment the same (one image or lockfile, the same "
                "launcher environment) before a job spans them",
            )
        )
    return findings

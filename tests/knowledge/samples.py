"""The fresh samples of real tickets issue 48's protocol gathered (bench/triage_fresh/<date>/), read by number."""

from __future__ import annotations

from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[2] / "bench" / "triage_fresh"


def sample_text(sample: str, number: str) -> str:
    """Text `number` ("104") of the sample gathered as `sample` ("2026-11-29g")."""
    (path,) = (SAMPLES / sample).glob(f"{number}-*.txt")
    return path.read_text()

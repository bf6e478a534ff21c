"""Run: python tests/resources/repro/hf_load_best_model_strategy_mismatch.py

load_best_model_at_end=True with checkpoints every N steps and evaluation left at its default ('no').
"""

from __future__ import annotations

import tempfile


def main() -> None:
    from transformers import TrainingArguments

    with tempfile.TemporaryDirectory() as folder:
        TrainingArguments(output_dir=folder, load_best_model_at_end=True, save_strategy="steps", report_to=[])


if __name__ == "__main__":
    main()

"""Run: python tests/resources/repro/hf_training_args_removed_argument.py

TrainingArguments built as tutorials written for transformers < 4.51 do, with evaluation_strategy (now eval_strategy).
"""

from __future__ import annotations

import tempfile


def main() -> None:
    from transformers import TrainingArguments

    with tempfile.TemporaryDirectory() as folder:
        TrainingArguments(output_dir=folder, evaluation_strategy="epoch", report_to=[])


if __name__ == "__main__":
    main()

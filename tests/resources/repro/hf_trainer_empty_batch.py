"""Run: python tests/resources/repro/hf_trainer_empty_batch.py

Trainer given a dataset that was never tokenized (a 'text' column only) and no collator of its own:
remove_unused_columns drops the column, since no forward argument is named 'text', and the first batch is empty. A
tiny Llama from a config, on the CPU; the rows are a datasets-free list of dicts, as the Trainer accepts.
"""

from __future__ import annotations

import os
import tempfile


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=64
    )
    rows = [{"text": "an instruction and its answer"} for _ in range(4)]
    with tempfile.TemporaryDirectory() as folder:
        args = TrainingArguments(
            output_dir=folder,
            per_device_train_batch_size=2,
            max_steps=1,
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
        )
        Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=rows).train()


if __name__ == "__main__":
    main()

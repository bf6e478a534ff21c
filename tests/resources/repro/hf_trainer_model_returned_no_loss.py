"""Run: python tests/resources/repro/hf_trainer_model_returned_no_loss.py

Trainer on a causal-LM dataset with input_ids and attention_mask but no labels (and no collator that makes them): the
model returns only logits and the first training step fails. A tiny Llama from a config, on the CPU.
"""

from __future__ import annotations

import os
import tempfile


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=64
    )
    rows = [
        {"input_ids": torch.tensor([3, 4, 5, 6]), "attention_mask": torch.ones(4, dtype=torch.long)}
        for _ in range(4)
    ]
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

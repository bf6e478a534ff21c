"""Run: python tests/resources/repro/hf_trainer_resume_no_valid_checkpoint.py

Trainer.train(resume_from_checkpoint=...) given a checkpoint-N folder that a save cut short left with only its
trainer_state.json (no weights): the Trainer's check refuses it before loading anything. A tiny Llama from a config, on
the CPU.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=64
    )
    rows = [{"input_ids": torch.tensor([3, 4, 5, 6]), "labels": torch.tensor([3, 4, 5, 6])} for _ in range(4)]
    with tempfile.TemporaryDirectory() as folder:
        checkpoint = Path(folder) / "checkpoint-2"
        checkpoint.mkdir()
        (checkpoint / "trainer_state.json").write_text("{}")
        args = TrainingArguments(
            output_dir=folder,
            per_device_train_batch_size=2,
            max_steps=2,
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
        )
        Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=rows).train(
            resume_from_checkpoint=str(checkpoint)
        )


if __name__ == "__main__":
    main()

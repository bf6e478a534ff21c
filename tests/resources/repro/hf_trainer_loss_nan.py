"""Run: python tests/resources/repro/hf_trainer_loss_nan.py

The HF Trainer's log once training has diverged: a learning rate far too high (here absurdly so, to diverge within
two steps on a tiny Llama built from a config) makes the weights inf, then the loss and gradients NaN. The Trainer's
logging_nan_inf_filter keeps NaN losses out of the logged average, so the log shows 'loss' 0 beside a NaN grad_norm.
"""

from __future__ import annotations

import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


class Rows(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = torch.arange(1, 9) + index
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    with tempfile.TemporaryDirectory() as folder:
        args = TrainingArguments(
            output_dir=folder,
            per_device_train_batch_size=2,
            max_steps=3,
            logging_steps=1,
            learning_rate=1e12,
            max_grad_norm=0.0,
            report_to=[],
            use_cpu=True,
            save_strategy="no",
        )
        Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=Rows()).train()


if __name__ == "__main__":
    main()

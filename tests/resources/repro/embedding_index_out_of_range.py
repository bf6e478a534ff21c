"""Run: python tests/resources/repro/embedding_index_out_of_range.py

A token id past the embedding table: the tokenizer gained tokens (or is another model's) and the model's embeddings
were not resized. A tiny Llama built from a config; on the CPU the lookup raises what a GPU reports as a device-side
assert (`srcIndex < srcSelectDimSize`).
"""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main() -> None:
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    model = LlamaForCausalLM(config)
    input_ids = torch.tensor([[1, 5, 64, 7]])  # 64: a token added to the tokenizer only
    model(input_ids=input_ids, labels=input_ids)


if __name__ == "__main__":
    main()

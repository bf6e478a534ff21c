"""Run: python tests/resources/repro/sampling_probs_inf_nan.py

Sampling from logits that overflowed: generate(do_sample=True) on a model whose output turned inf/NaN (fp16 overflow
in a model trained in bf16, or weights already NaN after a diverged fine-tune) hands torch.multinomial a NaN
distribution. A tiny Llama whose lm_head is set to inf stands in for the overflow.
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
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.lm_head.weight.fill_(float("inf"))
    model.generate(torch.tensor([[1, 5, 9]]), do_sample=True, max_new_tokens=2)


if __name__ == "__main__":
    main()

"""Run: python tests/resources/repro/hf_bnb_package_unavailable.py

A 4-bit bitsandbytes load where bitsandbytes cannot be used (here: not installed, on a CPU machine): from_pretrained
refuses before reading any weight. A tiny Llama is saved to a temporary folder first (no download).
"""

from __future__ import annotations

import os
import tempfile


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=64
    )
    with tempfile.TemporaryDirectory() as folder:
        LlamaForCausalLM(config).save_pretrained(folder)
        AutoModelForCausalLM.from_pretrained(
            folder, quantization_config=BitsAndBytesConfig(load_in_4bit=True)
        )


if __name__ == "__main__":
    main()

"""Run: python tests/resources/repro/hf_flash_attn_package_unavailable.py

attn_implementation='flash_attention_2' for a model that supports it (Llama) in an environment without flash-attn (this
CPU machine), as a trainer that turns FA2 on by default does. A tiny config, no download.
"""

from __future__ import annotations

import os


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=64
    )
    AutoModelForCausalLM.from_config(config, attn_implementation="flash_attention_2")


if __name__ == "__main__":
    main()

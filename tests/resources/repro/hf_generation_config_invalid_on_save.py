"""Run: python tests/resources/repro/hf_generation_config_invalid_on_save.py

A tiny Llama whose generation config carries sampling parameters with do_sample off (as Llama-2-chat's
generation_config.json does), saved at the end of a run: save_pretrained refuses it.
"""

from __future__ import annotations

import os
import tempfile


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=64
    )
    model = LlamaForCausalLM(config)
    model.generation_config.do_sample = False
    model.generation_config.temperature = 0.9
    model.generation_config.top_p = 0.6
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)


if __name__ == "__main__":
    main()

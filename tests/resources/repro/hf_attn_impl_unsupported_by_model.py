"""Run: python tests/resources/repro/hf_attn_impl_unsupported_by_model.py

attn_implementation='flash_attention_2' asked of a model class that has no FlashAttention path (MPT): the check runs
before any weight exists, so no GPU and no flash-attn are needed to see it. A tiny config, no download.
"""

from __future__ import annotations

import os


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, MptConfig

    config = MptConfig(d_model=32, n_heads=2, n_layers=1, vocab_size=64)
    AutoModelForCausalLM.from_config(config, attn_implementation="flash_attention_2")


if __name__ == "__main__":
    main()

"""Run: python tests/resources/repro/hf_load_in_kbit_kwarg.py

from_pretrained(..., load_in_8bit=True) as scripts written before BitsAndBytesConfig do: transformers 5 no longer takes
the keyword and hands it to the model's constructor. A tiny Llama is saved to a temporary folder first (no download);
the error comes before any quantization, so bitsandbytes and a GPU are not needed.
"""

from __future__ import annotations

import os
import tempfile


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=64
    )
    with tempfile.TemporaryDirectory() as folder:
        LlamaForCausalLM(config).save_pretrained(folder)
        AutoModelForCausalLM.from_pretrained(folder, load_in_8bit=True)


if __name__ == "__main__":
    main()

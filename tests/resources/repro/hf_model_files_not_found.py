"""Run: python tests/resources/repro/hf_model_files_not_found.py

A checkpoint-N folder as a ZeRO-3 run leaves it without stage3_gather_16bit_weights_on_model_save: config.json and
the engine's global_step folder, but no model.safetensors. Loaded as a model with from_pretrained, the folder lacks the
weights file. Written to a temporary directory; nothing is downloaded.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM, LlamaConfig

    with tempfile.TemporaryDirectory() as folder:
        checkpoint = Path(folder) / "checkpoint-100"
        LlamaConfig(
            hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2
        ).save_pretrained(checkpoint)
        (checkpoint / "global_step100").mkdir()
        AutoModelForCausalLM.from_pretrained(str(checkpoint))


if __name__ == "__main__":
    main()

"""Run: python tests/resources/repro/hf_unrecognized_model_type.py

A checkpoint folder whose config.json names a model_type this transformers does not know (as a model newer than the
installed release does). The folder is written to a temporary directory; nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig

    with tempfile.TemporaryDirectory() as folder:
        config = {"model_type": "qwen9_moe", "architectures": ["Qwen9MoeForCausalLM"], "hidden_size": 32}
        (Path(folder) / "config.json").write_text(json.dumps(config))
        AutoConfig.from_pretrained(folder)


if __name__ == "__main__":
    main()

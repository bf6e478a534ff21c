"""Run: python tests/resources/repro/hf_trust_remote_code_required.py

A checkpoint folder whose config.json maps AutoConfig to code shipped beside it (auto_map), loaded without
trust_remote_code in a run that cannot answer the [y/N] prompt (stdin empty, as under torchrun or a batch job). The
folder is written to a temporary directory; nothing is downloaded and the custom code is never run.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from pathlib import Path

CUSTOM_CONFIG = """\
from transformers import PretrainedConfig


class TinyConfig(PretrainedConfig):
    model_type = "tiny_custom"
"""


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoConfig

    sys.stdin = io.StringIO("")
    with tempfile.TemporaryDirectory() as folder:
        config = {"model_type": "tiny_custom", "auto_map": {"AutoConfig": "configuration_tiny.TinyConfig"}}
        (Path(folder) / "config.json").write_text(json.dumps(config))
        (Path(folder) / "configuration_tiny.py").write_text(CUSTOM_CONFIG)
        AutoConfig.from_pretrained(folder)


if __name__ == "__main__":
    main()

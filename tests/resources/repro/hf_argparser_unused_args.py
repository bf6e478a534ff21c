"""Run: python tests/resources/repro/hf_argparser_unused_args.py

A command line written for an older transformers (--evaluation_strategy, removed in 4.51) parsed by HfArgumentParser
into TrainingArguments.
"""

from __future__ import annotations

import tempfile


def main() -> None:
    from transformers import HfArgumentParser, TrainingArguments

    with tempfile.TemporaryDirectory() as folder:
        argv = ["--output_dir", folder, "--evaluation_strategy", "no", "--report_to", "none"]
        HfArgumentParser(TrainingArguments).parse_args_into_dataclasses(args=argv)


if __name__ == "__main__":
    main()

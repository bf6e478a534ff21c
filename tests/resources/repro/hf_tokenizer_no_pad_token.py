"""Run: python tests/resources/repro/hf_tokenizer_no_pad_token.py

A batch padded with a tokenizer that defines no pad token (as GPT-2's and Llama's base tokenizers). The tokenizer is
built in memory from a tiny word-level vocabulary (no download).
"""

from __future__ import annotations

import os


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(["<unk>", "<s>", "</s>", "hello", "world"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer(["hello", "hello world"], padding=True)


if __name__ == "__main__":
    main()

"""Run: python tests/resources/repro/hf_chat_template_missing.py

A tokenizer with no chat_template (as a base checkpoint's) asked to format a conversation, as SFT on a 'messages'
dataset does. The tokenizer is built in memory from a tiny word-level vocabulary (no download).
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
    tokenizer.apply_chat_template([{"role": "user", "content": "hello world"}], tokenize=False)


if __name__ == "__main__":
    main()

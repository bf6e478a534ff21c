"""Run: python tests/resources/repro/hf_batch_tensor_unequal_lengths.py

A padding collator (DataCollatorWithPadding) given causal-LM rows whose labels have different lengths: it pads
input_ids and attention_mask, not labels, and cannot stack them. The tokenizer is built in memory (no download).
"""

from __future__ import annotations

import os


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import DataCollatorWithPadding, PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(["<pad>", "<unk>", "hello", "world", "again"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>")
    rows = []
    for text in ["hello", "hello world again"]:
        row = dict(tokenizer(text))
        row["labels"] = list(row["input_ids"])
        rows.append(row)
    DataCollatorWithPadding(tokenizer)(rows)


if __name__ == "__main__":
    main()

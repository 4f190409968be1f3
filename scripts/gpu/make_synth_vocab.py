#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer.json of exactly N tokens (default 128,256: the synthetic 8B
Llama's vocabulary) for exporting a `quantscope-cli synth` model as GGUF: llama.cpp loads no GGUF
without a vocabulary, and quantscope-cli accepts only a tokenizer whose size is the model's.

A GPT-2 style byte-level BPE: the 256 byte tokens, merges of the most common English letter pairs
and words so that text tokenizes into a few ids, then filler tokens up to N. Only the size and a
valid structure matter here: it is for speed runs (llama-bench), never for text quality.
Usage: make_synth_vocab.py OUT.json [N]
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from gpt2_bytes import bytes_to_unicode  # noqa: E402  (GPT-2's byte alphabet, shared)


def main():
    out = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 128256
    byte_chars = [bytes_to_unicode()[b] for b in range(256)]
    vocab = {c: i for i, c in enumerate(byte_chars)}
    merges = []
    space = bytes_to_unicode()[ord(" ")]
    # Merges that build " the", " and", "in", "er" … (each result a token of its own).
    for a, b in [("t", "h"), ("th", "e"), (space, "the"), ("a", "n"), ("an", "d"), (space, "and"),
                 ("i", "n"), ("e", "r"), ("o", "n"), (space, "a")]:
        tok = a + b
        if tok not in vocab and len(vocab) < n:
            vocab[tok] = len(vocab)
            merges.append(f"{a} {b}")
    i = 0
    while len(vocab) < n:
        vocab[f"{space}filler{i}"] = len(vocab)
        i += 1
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": merges},
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    print(f"{out}: {len(vocab)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()

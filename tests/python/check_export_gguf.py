"""Checks a GGUF file written by `quantscope-cli export --to gguf` with gguf-py (the reader
llama.cpp's own tools use): header, metadata, llama.cpp tensor names and, for each NAME=FILE.f32
argument, that gguf-py's own dequantisation of tensor NAME equals the float32 values in FILE
(Quantscope's reader's values of the same tensor).
usage: check_export_gguf.py MODEL.gguf [NAME=FILE.f32 ...]"""
import re
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize

LLAMA_NAME = re.compile(r"^(token_embd|output_norm|output|blk\.\d+\.(attn_(q|k|v|output|norm)|ffn_(gate|up|down|norm)))\.weight$")


def field_value(r, key):
    f = r.fields[key]
    part = f.parts[f.data[0]]
    if f.types[0].name == "STRING":
        return bytes(part).decode()
    return part.tolist()[0]


def main():
    r = GGUFReader(sys.argv[1])
    assert field_value(r, "general.architecture") == "llama", "architecture"
    tokens = r.fields["tokenizer.ggml.tokens"]
    assert len(tokens.data) == 512, f"{len(tokens.data)} tokens"
    assert field_value(r, "tokenizer.ggml.model") == "llama"
    for key in ("llama.embedding_length", "llama.block_count", "llama.attention.head_count",
                "llama.attention.head_count_kv", "llama.feed_forward_length", "llama.context_length"):
        assert key in r.fields, key
    by_name = {t.name: t for t in r.tensors}
    for name in by_name:
        assert LLAMA_NAME.match(name), f"not a llama.cpp tensor name: {name}"
    checked = {}
    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        t = by_name[name]
        ours = np.fromfile(path, dtype=np.float32)
        theirs = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        assert theirs.size == ours.size, f"{name}: {theirs.size} vs {ours.size} values"
        diff = np.abs(theirs - ours)
        # Same formula in float32 on both sides: equal up to the last bit of d*q + m.
        tol = 1e-6 * max(1.0, float(np.abs(ours).max()))
        assert diff.max() <= tol, f"{name} ({t.tensor_type.name}): max |diff| {diff.max()} at {diff.argmax()}"
        checked[t.tensor_type.name] = checked.get(t.tensor_type.name, 0) + 1
    print(f"gguf-py: {len(by_name)} tensors, dequantised and equal: {checked}")


main()

"""Checks the vocabulary a GGUF export carries with gguf-py (the reader llama.cpp's tools use):
tokenizer.ggml.model, the pre-tokenizer name, and tokens / merges / special ids equal to the
Hugging Face tokenizer.json they came from.
usage: check_gguf_vocab.py MODEL.gguf tokenizer.json EXPECTED_PRE"""
import json
import sys

from gguf import GGUFReader


def strings(r, key):
    f = r.fields[key]
    return [bytes(f.parts[i]).decode() for i in f.data]


def scalar(r, key):
    f = r.fields[key]
    part = f.parts[f.data[0]]
    if f.types[0].name == "STRING":
        return bytes(part).decode()
    return part.tolist()[0]


def main():
    r = GGUFReader(sys.argv[1])
    tj = json.load(open(sys.argv[2], encoding="utf-8"))
    want_pre = sys.argv[3]
    assert scalar(r, "tokenizer.ggml.model") == "gpt2", scalar(r, "tokenizer.ggml.model")
    assert scalar(r, "tokenizer.ggml.pre") == want_pre, scalar(r, "tokenizer.ggml.pre")
    vocab = dict(tj["model"]["vocab"])
    for a in tj.get("added_tokens", []):
        vocab[a["content"]] = a["id"]
    tokens = strings(r, "tokenizer.ggml.tokens")
    for text, i in vocab.items():
        assert tokens[i] == text, f"token {i}: {tokens[i]!r} != {text!r}"
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    got = strings(r, "tokenizer.ggml.merges")
    assert got == merges, f"{len(got)} merges vs {len(merges)}"
    types = r.fields["tokenizer.ggml.token_type"]
    ttypes = [int(types.parts[i][0]) for i in types.data]
    for a in tj.get("added_tokens", []):
        assert ttypes[a["id"]] == (3 if a.get("special") else 4), f"type of {a['content']}"
    emb = [t for t in r.tensors if t.name == "token_embd.weight"][0]
    assert len(tokens) == int(emb.shape[1]), f"{len(tokens)} tokens, embedding {list(emb.shape)}"
    print(f"gguf-py: gpt2 vocabulary, {len(tokens)} tokens, {len(got)} merges, pre {want_pre}")


if __name__ == "__main__":
    main()

"""Regenerates the committed seed corpora in tests/fuzz/corpus/<target>/ (small files, each a
valid example of what the reader accepts, so the fuzzer starts from deep inside the formats).

usage: QS_PYTHON tests/fuzz/make_seeds.py   (needs numpy, gguf, safetensors, tokenizers)"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
import make_gguf_fixture as gf  # noqa: E402
import make_safetensors_fixture as sf  # noqa: E402
import gguf  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402


def out(target, name):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def gguf_seeds(tmp):
    gf.write_quant(tmp)
    shutil.copy(os.path.join(tmp, "quant.gguf"), out("gguf", "all_types.gguf"))
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(out("gguf", "tiny_llama.gguf"), "llama")
    gf.tiny_llama_vocab(w)
    d, ff = 32, 32
    for k, v in (("context_length", 16), ("embedding_length", d), ("block_count", 1), ("feed_forward_length", ff)):
        w.add_uint32("llama." + k, v)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_tensor("token_embd.weight", gguf.quants.quantize(rng.standard_normal((263, d)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    p = "blk.0."
    w.add_tensor(p + "attn_norm.weight", np.ones(d, np.float32))
    w.add_tensor(p + "ffn_norm.weight", np.ones(d, np.float32))
    for n, o, i in (("attn_q", d, d), ("attn_k", 16, d), ("attn_v", 16, d), ("attn_output", d, d), ("ffn_gate", ff, d), ("ffn_up", ff, d), ("ffn_down", d, ff)):
        w.add_tensor(p + n + ".weight", gguf.quants.quantize(rng.standard_normal((o, i)).astype(np.float32), gguf.GGMLQuantizationType.Q4_0), raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def safetensors_seeds(tmp):
    sf.write_dtypes(tmp)
    shutil.copy(os.path.join(tmp, "lib.safetensors"), out("safetensors", "lib.safetensors"))
    shutil.copy(os.path.join(tmp, "raw.safetensors"), out("safetensors", "raw.safetensors"))
    rng = np.random.default_rng(2)
    save_file({"wte.weight": rng.standard_normal((8, 4)).astype(np.float16),
               "h.0.attn.c_attn.weight": rng.standard_normal((4, 12)).astype(np.float32),
               "h.0.attn.bias": np.ones((1, 1, 2, 2), np.float32)},
              out("safetensors", "gpt2ish.safetensors"), metadata={"format": "pt"})
    with open(out("safetensors", "index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 64}, "weight_map": {"a": "lib.safetensors"}}, f)


def llama2c_seeds():
    # dim 8, hidden 12, 1 layer, 2 heads, 1 kv head, vocab 16, seq 4: legacy and version-1 headers
    d, hd, L, H, KV, V, S = 8, 12, 1, 2, 1, 16, 4
    head = d // H
    kv = head * KV
    rng = np.random.default_rng(3)
    def w(*shape):
        return rng.standard_normal(shape).astype(np.float32).tobytes()
    legacy = struct.pack("<7i", d, hd, L, H, KV, V, S)
    legacy += w(V, d) + w(L, d) + w(L, d, d) + w(L, kv, d) + w(L, kv, d) + w(L, d, d) + w(L, d) + w(L, hd, d) + w(L, d, hd) + w(L, hd, d) + w(d) + w(S, head // 2) + w(S, head // 2)
    open(out("llama2c", "legacy.bin"), "wb").write(legacy)
    v1 = struct.pack("<Ii7iB", 0x616B3432, 1, d, hd, L, H, KV, V, S, 1)
    v1 += b"\0" * (256 - len(v1))
    v1 += w(L, d) + w(L, d) + w(d) + w(V, d) + w(L, d, d) + w(L, kv, d) + w(L, kv, d) + w(L, d, d) + w(L, hd, d) + w(L, d, hd) + w(L, hd, d)
    open(out("llama2c", "v1.bin"), "wb").write(v1)


def tokenizer_seeds(tmp):
    # first byte 0: a tokenizer file; 1: text
    tok512 = open(os.path.join(ROOT, "datasets", "models", "stories260K", "tok512.bin"), "rb").read()
    open(out("tokenizer", "tok512.bin"), "wb").write(b"\0" + tok512)
    subprocess.check_call([sys.executable, os.path.join(ROOT, "tests", "fixtures", "make_tokenizer_fixture.py"),
                           os.path.join(tmp, "tk"), os.path.join(ROOT, "datasets", "text", "tinyshakespeare.txt")])
    for style in ("gpt2", "llama3"):
        for name in ("tokenizer.json", "vocab.gguf"):
            data = open(os.path.join(tmp, "tk", style, name), "rb").read()
            open(out("tokenizer", f"{style}_{name}"), "wb").write(b"\0" + data)
    for i, text in enumerate(["Once upon a time, there was a little girl.", "naïve 🦙 <s> </s>\n\t  x", "\xff\xfe bytes"]):
        open(out("tokenizer", f"text{i}"), "wb").write(b"\1" + text.encode("utf-8", "surrogateescape"))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        gguf_seeds(os.path.join(tmp, "g"))
        safetensors_seeds(os.path.join(tmp, "s"))
        llama2c_seeds()
        tokenizer_seeds(tmp)

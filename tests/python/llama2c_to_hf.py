#!/usr/bin/env python3
"""Converts a llama2.c legacy checkpoint to a Hugging Face Llama safetensors + config.json the way
Hugging Face's own conversion does: q/k rows permuted from Meta's interleaved RoPE pairs to the
"rotate_half" order. Running both files must give the same logits; the runtime test checks it.

usage: llama2c_to_hf.py MODEL.bin OUT_DIR
"""
import json
import os
import struct
import sys

import numpy as np
from safetensors.numpy import save_file


def permute(w, n_heads):
    # Meta → HF: within each head, rows (2i, 2i+1) become (i, i + head_dim/2).
    out_dim, in_dim = w.shape
    return w.reshape(n_heads, out_dim // n_heads // 2, 2, in_dim).transpose(0, 2, 1, 3).reshape(out_dim, in_dim)


def main():
    src, out = sys.argv[1], sys.argv[2]
    raw = open(src, "rb").read()
    dim, hidden, L, H, KV, vocab, seq = struct.unpack("<7i", raw[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    hd = dim // H
    kv = hd * KV
    w = np.frombuffer(raw, dtype="<f4", offset=28)
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        a = w[pos:pos + n].reshape(shape).copy()
        pos += n
        return a

    emb = take(vocab, dim)
    att_norm = take(L, dim); wq = take(L, dim, dim); wk = take(L, kv, dim); wv = take(L, kv, dim)
    wo = take(L, dim, dim); ffn_norm = take(L, dim); w1 = take(L, hidden, dim); w2 = take(L, dim, hidden)
    w3 = take(L, hidden, dim); norm = take(dim)
    t = {"model.embed_tokens.weight": emb, "model.norm.weight": norm}
    for i in range(L):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = att_norm[i]
        t[p + "post_attention_layernorm.weight"] = ffn_norm[i]
        t[p + "self_attn.q_proj.weight"] = permute(wq[i], H)
        t[p + "self_attn.k_proj.weight"] = permute(wk[i], KV)
        t[p + "self_attn.v_proj.weight"] = wv[i]
        t[p + "self_attn.o_proj.weight"] = wo[i]
        t[p + "mlp.gate_proj.weight"] = w1[i]
        t[p + "mlp.up_proj.weight"] = w3[i]
        t[p + "mlp.down_proj.weight"] = w2[i]
    if not shared:
        raise SystemExit("only shared-classifier checkpoints are handled here")
    os.makedirs(out, exist_ok=True)
    save_file(t, os.path.join(out, "model.safetensors"))
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": dim,
           "intermediate_size": hidden, "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": KV, "vocab_size": vocab, "max_position_embeddings": seq,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
           "hidden_act": "silu"}
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)


if __name__ == "__main__":
    main()

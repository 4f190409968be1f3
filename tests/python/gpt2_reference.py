#!/usr/bin/env python3
"""Independent GPT-2 reference for the runtime test.

Writes a small GPT-2-shaped model with random weights in the Hugging Face layout
(model.safetensors with Conv1D weights stored [in, out], config.json), runs the forward pass in
numpy float64 on a token sequence, and writes the logits ([T, vocab], float64, little endian) and
the tokens. The C++ test opens the same files with our reader and compares.

usage: gpt2_reference.py OUT_DIR [--seed S] [--tokens N]
"""
import argparse
import json
import os

import numpy as np
from safetensors.numpy import save_file

from gpt2_numpy_forward import forward  # the same float64 forward the trained-model test uses


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=23)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    d, L, H, V, P, eps = 48, 3, 4, 97, 64, 1e-5
    f = 4 * d

    def rnd(*shape, s=0.08):
        return (rng.standard_normal(shape) * s).astype(np.float32)

    t = {"wte.weight": rnd(V, d, s=0.3), "wpe.weight": rnd(P, d, s=0.1),
         "ln_f.weight": (1 + rnd(d)).astype(np.float32), "ln_f.bias": rnd(d)}
    for i in range(L):
        p = f"h.{i}."
        t[p + "ln_1.weight"] = (1 + rnd(d)).astype(np.float32)
        t[p + "ln_1.bias"] = rnd(d)
        t[p + "attn.c_attn.weight"] = rnd(d, 3 * d)   # Conv1D: [in, out]
        t[p + "attn.c_attn.bias"] = rnd(3 * d)
        t[p + "attn.c_proj.weight"] = rnd(d, d)
        t[p + "attn.c_proj.bias"] = rnd(d)
        t[p + "ln_2.weight"] = (1 + rnd(d)).astype(np.float32)
        t[p + "ln_2.bias"] = rnd(d)
        t[p + "mlp.c_fc.weight"] = rnd(d, f)
        t[p + "mlp.c_fc.bias"] = rnd(f)
        t[p + "mlp.c_proj.weight"] = rnd(f, d)
        t[p + "mlp.c_proj.bias"] = rnd(d)
    os.makedirs(a.out, exist_ok=True)
    save_file(t, os.path.join(a.out, "model.safetensors"))
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": d, "n_layer": L,
           "n_head": H, "n_positions": P, "n_ctx": P, "vocab_size": V, "layer_norm_epsilon": eps,
           "activation_function": "gelu_new", "tie_word_embeddings": True}
    with open(os.path.join(a.out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)

    tokens = rng.integers(0, V, size=a.tokens)
    g = {k: v.astype(np.float64) for k, v in t.items()}
    logits = forward(g, cfg, tokens)
    logits.astype("<f8").tofile(os.path.join(a.out, "logits.f64"))
    tokens.astype("<i4").tofile(os.path.join(a.out, "tokens.i32"))


if __name__ == "__main__":
    main()

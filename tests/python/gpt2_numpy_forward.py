#!/usr/bin/env python3
"""Independent numpy float64 forward pass of a Hugging Face GPT-2 folder (model.safetensors with
GPT-2's names and Conv1D [in, out] layouts, config.json), for tests of trained GPT-2 models.

Reads windows of token ids (int32 little endian, `--window` ids each; every window is run from
position 0) and writes, for each window in order, the logits [window, vocab] (float64 little
endian) to OUT/logits.f64 and the summed negative log-likelihood of each window's tokens 1.. given
the ones before them to OUT/nll.f64 (one float64 per window).

usage: gpt2_numpy_forward.py MODEL_DIR TOKENS_I32 OUT_DIR --window N
"""
import argparse
import json
import os

import numpy as np
from safetensors.numpy import load_file


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def forward(g, cfg, tokens):
    L, H, eps = cfg["n_layer"], cfg["n_head"], cfg["layer_norm_epsilon"]
    T = len(tokens)
    d = g["wte.weight"].shape[1]
    hd = d // H
    x = g["wte.weight"][tokens] + g["wpe.weight"][np.arange(T)]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(L):
        p = f"h.{i}."
        h = layer_norm(x, g[p + "ln_1.weight"], g[p + "ln_1.bias"], eps)
        q, k, v = np.split(h @ g[p + "attn.c_attn.weight"] + g[p + "attn.c_attn.bias"], 3, axis=-1)
        heads = []
        for j in range(H):
            s = slice(j * hd, (j + 1) * hd)
            sc = q[:, s] @ k[:, s].T / np.sqrt(hd) + mask
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            heads.append(sc @ v[:, s])
        x = x + np.concatenate(heads, -1) @ g[p + "attn.c_proj.weight"] + g[p + "attn.c_proj.bias"]
        h = layer_norm(x, g[p + "ln_2.weight"], g[p + "ln_2.bias"], eps)
        x = x + gelu_tanh(h @ g[p + "mlp.c_fc.weight"] + g[p + "mlp.c_fc.bias"]) @ g[p + "mlp.c_proj.weight"] \
            + g[p + "mlp.c_proj.bias"]
    x = layer_norm(x, g["ln_f.weight"], g["ln_f.bias"], eps)
    return x @ g["wte.weight"].T  # tied lm_head


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("tokens")
    ap.add_argument("out")
    ap.add_argument("--window", type=int, required=True)
    a = ap.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    g = {k.removeprefix("transformer."): v.astype(np.float64)
         for k, v in load_file(os.path.join(a.model, "model.safetensors")).items()}
    ids = np.fromfile(a.tokens, dtype="<i4")
    if len(ids) % a.window:
        raise SystemExit(f"{len(ids)} tokens are not whole windows of {a.window}")
    os.makedirs(a.out, exist_ok=True)
    logits, nll = [], []
    for w in ids.reshape(-1, a.window):
        z = forward(g, cfg, w)
        z_max = z.max(-1, keepdims=True)
        logp = z - z_max - np.log(np.exp(z - z_max).sum(-1, keepdims=True))
        nll.append(-logp[np.arange(len(w) - 1), w[1:]].sum())
        logits.append(z)
    np.concatenate(logits).astype("<f8").tofile(os.path.join(a.out, "logits.f64"))
    np.array(nll, "<f8").tofile(os.path.join(a.out, "nll.f64"))


if __name__ == "__main__":
    main()

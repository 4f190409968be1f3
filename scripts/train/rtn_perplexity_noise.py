#!/usr/bin/env python3
"""How much of a perplexity difference is noise? An independent numpy look at RTN on a GPT-2 folder.

Quantizes every block linear (c_attn, attn.c_proj, c_fc, mlp.c_proj; the tied head stays FP32)
with symmetric INT4 round-to-nearest in groups of G input rows (scale = max|w| / 7 per group of
each output column, codes clipped to [-8, 7]), scores text windows of EOT + 255 tokens (Quantscope's
protocol) with the float and the quantized model in float64, and prints the perplexities, the mean
KL(float ‖ RTN), and the standard error of the mean ΔNLL over windows — the scale below which two
quantized models' perplexities cannot be told apart on this text.

usage: rtn_perplexity_noise.py MODEL_DIR TOKENS_I32 [--group 32] [--ctx 256]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import load_file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))
from gpt2_numpy_forward import forward  # noqa: E402  (the tests' independent float64 forward)


def rtn_int4(w, group):  # w [in, out] (Conv1D), groups along `in`
    k, n = w.shape
    g = w.reshape(k // group, group, n)
    s = np.abs(g).max(axis=1, keepdims=True) / 7.0
    s[s == 0] = 1.0
    return (np.clip(np.round(g / s), -8, 7) * s).reshape(k, n)


def log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("tokens")
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--eot", type=int, default=0)
    a = ap.parse_args()
    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    w = {k: v.astype(np.float64) for k, v in load_file(os.path.join(a.model, "model.safetensors")).items()}
    q = dict(w)
    for k in w:
        if k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            q[k] = rtn_int4(w[k], a.group)
    ids = np.fromfile(a.tokens, dtype="<i4")
    n = a.ctx - 1
    dn, kl, cnt = [], 0.0, 0
    nll_f = nll_q = 0.0
    for s in range(0, len(ids), n):
        c = ids[s:s + n]
        x = np.concatenate([[a.eot], c])
        lf, lq = log_softmax(forward(w, cfg, x))[:len(c)], log_softmax(forward(q, cfg, x))[:len(c)]
        f_ = -lf[np.arange(len(c)), c].sum()
        q_ = -lq[np.arange(len(c)), c].sum()
        nll_f, nll_q = nll_f + f_, nll_q + q_
        dn.append((q_ - f_) / len(c))
        kl += (np.exp(lf) * (lf - lq)).sum()
        cnt += len(c)
    dn = np.array(dn)
    se = dn.std(ddof=1) / math.sqrt(len(dn))
    ppl_f, ppl_q = math.exp(nll_f / cnt), math.exp(nll_q / cnt)
    print(f"windows {len(dn)}, tokens {cnt}, int4 g{a.group} RTN (numpy)")
    print(f"float perplexity {ppl_f:.4f}, RTN perplexity {ppl_q:.4f}, KL {kl / cnt:.5f} nats/token")
    print(f"mean ΔNLL {(nll_q - nll_f) / cnt:+.5f} nats; standard error over windows {se:.5f} nats "
          f"(≈ {ppl_f * se:.4f} in perplexity)")


if __name__ == "__main__":
    main()

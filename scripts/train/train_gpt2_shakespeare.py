#!/usr/bin/env python3
"""Train the small GPT-2 of datasets/models/shakespeare-gpt2 from scratch (JAX + optax, CPU).

Reproduces the committed model: the byte-level BPE tokenizer (Hugging Face `tokenizers`), the
GPT-2 weights (Hugging Face GPT2LMHeadModel names and layouts), the held-out text and the golden
files the tests read. Everything is seeded; the run is deterministic on one CPU thread.

Data: tiny shakespeare (datasets/text/tinyshakespeare.txt). The first 90 % of the characters
(cut at the next line break) is the training split, the rest the held-out split; the tokenizer
and the model see only the training split.

Model: GPT-2 exactly as transformers' GPT2LMHeadModel computes it (learned position embeddings,
pre-LayerNorm blocks, fused c_attn, GELU tanh ("gelu_new"), final ln_f, lm_head tied to wte,
biases everywhere, LayerNorm eps 1e-5). Conv1D weights are stored [in, out] as in GPT-2.

Training protocol = Quantscope's perplexity protocol: every sequence is <|endoftext|> followed by
n_positions - 1 text tokens, and every text token is predicted.

usage (from the repository root, the venv of scripts/train/requirements.txt):
  XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
    nice -n 10 taskset -c 1 python scripts/train/train_gpt2_shakespeare.py \
    --out datasets/models/shakespeare-gpt2
"""
import argparse
import json
import math
import os
import time

import numpy as np

EOT = "<|endoftext|>"


def split_text(text, frac):
    cut = text.index("\n", int(len(text) * frac)) + 1
    return text[:cut], text[cut:]


def train_tokenizer(train_text, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    # GPT-2's pre-tokenizer: its regex, then bytes mapped to printable characters; no prefix space.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([train_text], trainer=trainer)
    return tok


def write_calibration_text(tok, train_text, held_text, out, min_tokens=8192):
    """calib.txt: the shortest tail of the training split, starting at a line, with at least
    `min_tokens` tokens. `cat calib.txt heldout.txt` is the --text of quantscope-cli quantize:
    calibration on training text, evaluation on held-out text. Returns the tail's token count
    (--calib-tokens) after checking that the concatenation tokenizes as the two parts do."""
    lines = train_text.splitlines(keepends=True)
    k = len(lines)
    while len(tok.encode("".join(lines[k:])).ids) < min_tokens:
        k -= 1
    tail = "".join(lines[k:])
    n = len(tok.encode(tail).ids)
    assert tok.encode(tail + held_text).ids == tok.encode(tail).ids + tok.encode(held_text).ids
    with open(os.path.join(out, "calib.txt"), "w", encoding="utf-8") as f:
        f.write(tail)
    return n


# ---------------------------------------------------------------------------------------------
# The model (JAX). Parameter names are the Hugging Face GPT-2 names without the "transformer."
# prefix (what GPT2LMHeadModel.save_pretrained writes for GPT-2's own checkpoints).

def init_params(rng, cfg):
    d, L, V, P = cfg["n_embd"], cfg["n_layer"], cfg["vocab_size"], cfg["n_positions"]
    std, proj_std = 0.02, 0.02 / math.sqrt(2 * L)  # GPT-2's init; residual projections scaled
    p = {"wte.weight": rng.normal(0, std, (V, d)), "wpe.weight": rng.normal(0, 0.01, (P, d)),
         "ln_f.weight": np.ones(d), "ln_f.bias": np.zeros(d)}
    for i in range(L):
        h = f"h.{i}."
        p[h + "ln_1.weight"], p[h + "ln_1.bias"] = np.ones(d), np.zeros(d)
        p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"] = rng.normal(0, std, (d, 3 * d)), np.zeros(3 * d)
        p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"] = rng.normal(0, proj_std, (d, d)), np.zeros(d)
        p[h + "ln_2.weight"], p[h + "ln_2.bias"] = np.ones(d), np.zeros(d)
        p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"] = rng.normal(0, std, (d, 4 * d)), np.zeros(4 * d)
        p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"] = rng.normal(0, proj_std, (4 * d, d)), np.zeros(d)
    return {k: np.asarray(v, np.float32) for k, v in p.items()}


def make_forward(cfg):
    import jax
    import jax.numpy as jnp
    L, H, eps = cfg["n_layer"], cfg["n_head"], cfg["layer_norm_epsilon"]

    def ln(x, w, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + eps) * w + b

    def gelu_new(x):
        return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    def forward(p, tokens):  # tokens [B, T] → logits [B, T, V]
        B, T = tokens.shape
        d = p["wte.weight"].shape[1]
        hd = d // H
        x = p["wte.weight"][tokens] + p["wpe.weight"][:T][None]
        causal = jnp.tril(jnp.ones((T, T), bool))
        for i in range(L):
            h = f"h.{i}."
            a = ln(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"])
            qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]
            q, k, v = jnp.split(qkv, 3, axis=-1)
            q, k, v = (t.reshape(B, T, H, hd).transpose(0, 2, 1, 3) for t in (q, k, v))
            s = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(hd)
            s = jnp.where(causal, s, -1e30)
            o = (jax.nn.softmax(s, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(B, T, d)
            x = x + o @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
            m = ln(x, p[h + "ln_2.weight"], p[h + "ln_2.bias"])
            m = gelu_new(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])
            x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
        x = ln(x, p["ln_f.weight"], p["ln_f.bias"])
        return x @ p["wte.weight"].T  # lm_head tied to wte

    return forward


def windows(ids, eot, T):
    """Quantscope's protocol: non-overlapping windows of [EOT] + T-1 text tokens (the last may be
    shorter); returns (inputs, targets, mask) padded to T."""
    n = T - 1
    rows = [ids[s:s + n] for s in range(0, len(ids), n)]
    X = np.full((len(rows), T), eot, np.int32)
    Y = np.zeros((len(rows), T), np.int32)
    M = np.zeros((len(rows), T), np.float32)
    for r, c in enumerate(rows):
        X[r, 1:1 + len(c)] = c
        Y[r, :len(c)] = c
        M[r, :len(c)] = 1
    return X, Y, M


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", default="datasets/text/tinyshakespeare.txt")
    ap.add_argument("--out", default="datasets/models/shakespeare-gpt2")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--embd", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--time-only", type=int, default=0, help="time this many steps and exit")
    a = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import optax
    from safetensors.numpy import save_file

    t_start = time.time()
    with open(a.text, encoding="utf-8") as f:
        text = f.read()
    train_text, held_text = split_text(text, 0.9)
    os.makedirs(a.out, exist_ok=True)

    tok = train_tokenizer(train_text, a.vocab)
    V = tok.get_vocab_size()
    eot = tok.token_to_id(EOT)
    train_ids = np.array(tok.encode(train_text).ids, np.int32)
    held_ids = np.array(tok.encode(held_text).ids, np.int32)
    assert tok.decode(held_ids.tolist()) == held_text, "byte-level BPE must round-trip"
    calib_tokens = write_calibration_text(tok, train_text, held_text, a.out)
    print(f"tokenizer: vocab {V}, EOT id {eot}; train {len(train_text)} chars → {len(train_ids)} tokens, "
          f"held-out {len(held_text)} chars → {len(held_ids)} tokens", flush=True)

    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
           "n_positions": a.ctx, "n_ctx": a.ctx, "n_embd": a.embd, "n_layer": a.layers,
           "n_head": a.heads, "n_inner": None, "activation_function": "gelu_new",
           "layer_norm_epsilon": 1e-5, "initializer_range": 0.02, "resid_pdrop": 0.0,
           "embd_pdrop": 0.0, "attn_pdrop": 0.0, "tie_word_embeddings": True,
           "bos_token_id": eot, "eos_token_id": eot, "torch_dtype": "float32"}
    forward = make_forward(cfg)
    params = {k: jnp.asarray(v) for k, v in init_params(np.random.default_rng(a.seed), cfg).items()}
    n_params = sum(int(np.prod(v.shape)) for v in params.values())
    print(f"model: {a.layers} layers, n_embd {a.embd}, {a.heads} heads, ctx {a.ctx}: {n_params:,} parameters",
          flush=True)

    def loss_fn(p, X, Y, M):
        logp = jax.nn.log_softmax(forward(p, X), axis=-1)
        nll = -jnp.take_along_axis(logp, Y[..., None], axis=-1)[..., 0]
        return (nll * M).sum() / M.sum()

    @jax.jit
    def nll_sum(p, X, Y, M):
        logp = jax.nn.log_softmax(forward(p, X), axis=-1)
        nll = -jnp.take_along_axis(logp, Y[..., None], axis=-1)[..., 0]
        return (nll * M).sum(), M.sum()

    # No decay on biases, LayerNorm gains, or position embeddings (the usual GPT-2 recipe).
    decay_mask = {k: (v.ndim == 2 and k != "wpe.weight") for k, v in params.items()}
    sched = optax.warmup_cosine_decay_schedule(0.0, a.lr, a.warmup, a.steps, end_value=a.lr * 0.05)
    opt = optax.chain(optax.clip_by_global_norm(1.0),
                      optax.adamw(sched, b1=0.9, b2=0.95, weight_decay=a.weight_decay, mask=decay_mask))
    state = opt.init(params)

    @jax.jit
    def step(p, s, X, Y, M):
        loss, g = jax.value_and_grad(loss_fn)(p, X, Y, M)
        upd, s = opt.update(g, s, p)
        return optax.apply_updates(p, upd), s, loss

    def evaluate(p, ids, max_windows=None):
        X, Y, M = windows(ids, eot, a.ctx)
        if max_windows:
            X, Y, M = X[:max_windows], Y[:max_windows], M[:max_windows]
        tot, cnt = 0.0, 0.0
        for i in range(0, len(X), 16):
            s_, c_ = nll_sum(p, X[i:i + 16], Y[i:i + 16], M[i:i + 16])
            tot, cnt = tot + float(s_), cnt + float(c_)
        return tot / cnt, int(cnt)

    rng = np.random.default_rng(a.seed + 1)
    n = a.ctx - 1
    mask = np.ones((a.batch, a.ctx), np.float32)
    mask[:, -1] = 0  # the last position would predict past the window

    def batch():  # random windows of the training split, laid out as in windows()
        starts = rng.integers(0, len(train_ids) - n + 1, a.batch)
        X = np.full((a.batch, a.ctx), eot, np.int32)
        Y = np.zeros((a.batch, a.ctx), np.int32)
        for r, s in enumerate(starts):
            X[r, 1:] = train_ids[s:s + n]
            Y[r, :n] = train_ids[s:s + n]
        return X, Y, mask

    log = []
    t0 = time.time()
    for it in range(1, a.steps + 1):
        X, Y, M = batch()
        params, state, loss = step(params, state, X, Y, M)
        if a.time_only and it == 1:
            jax.block_until_ready(params)
            t1 = time.time()
        if a.time_only and it == a.time_only:
            jax.block_until_ready(params)
            print(f"first step (compile) {t1 - t0:.1f} s, then {(time.time() - t1) / (it - 1):.3f} s/step", flush=True)
            return
        if it % a.eval_every == 0 or it == a.steps:
            held, _ = evaluate(params, held_ids, max_windows=32)
            row = {"step": it, "train_loss_batch": float(loss), "heldout_loss_32w": held,
                   "elapsed_s": round(time.time() - t0, 1)}
            log.append(row)
            print(json.dumps(row), flush=True)
    train_s = time.time() - t0

    train_loss, train_n = evaluate(params, train_ids[: 40 * (a.ctx - 1)])  # first 40 windows
    held_loss, held_n = evaluate(params, held_ids)
    print(f"final: train loss {train_loss:.4f} (ppl {math.exp(train_loss):.3f}, {train_n} tokens), "
          f"held-out loss {held_loss:.4f} (ppl {math.exp(held_loss):.3f}, {held_n} tokens); "
          f"training {train_s:.0f} s", flush=True)

    # ---- export (Hugging Face layout) ----
    host = {k: np.asarray(v, np.float32) for k, v in params.items()}
    save_file(host, os.path.join(a.out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    tok.save(os.path.join(a.out, "tokenizer.json"))
    with open(os.path.join(a.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(held_text)
    # Golden ids of `tokenizers` for the held-out text (int32 little endian), for our tokenizer test.
    held_ids.astype("<i4").tofile(os.path.join(a.out, "heldout.tokens.i32"))
    # The JAX model's own held-out figures under Quantscope's protocol (windows of EOT + ctx-1).
    slice_loss, slice_n = evaluate(params, held_ids[: 4 * (a.ctx - 1)])
    report = {"seed": a.seed, "steps": a.steps, "batch": a.batch, "ctx": a.ctx, "lr": a.lr,
              "warmup": a.warmup, "weight_decay": a.weight_decay, "parameters": n_params,
              "train_seconds": round(train_s, 1), "total_seconds": round(time.time() - t_start, 1),
              "jax": jax.__version__, "optax": optax.__version__,
              "train_tokens": int(len(train_ids)), "heldout_tokens": int(len(held_ids)),
              "calib_tokens": calib_tokens,
              "final_train_loss_40w": train_loss, "final_heldout_loss": held_loss,
              "final_heldout_perplexity": math.exp(held_loss), "heldout_scored_tokens": held_n,
              "heldout_first4w_loss": slice_loss, "heldout_first4w_tokens": slice_n,
              "log": log}
    with open(os.path.join(a.out, "training.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

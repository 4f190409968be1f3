#!/usr/bin/env python3
"""Tiny random models written by Hugging Face transformers, with transformers' own logits.

For every case: <out>/<case>/config.json + model.safetensors (save_pretrained, float32) and
ref.json naming the token ids, plus prefill.f32 (logits of every position of a full prefill,
[T, vocab], little-endian float32) and decode.f32 (the last token's logits after a KV-cached
prefill of T-1 tokens and one decode step, [vocab]). Cases named refuse_* carry only a config.json that
Quantscope must refuse; ref.json names the key the refusal must mention.

  make_hf_fixtures.py --out tests/data/hf_ref          # regenerate the committed fixtures
  make_hf_fixtures.py --live TEST_EXE                  # write to a temp dir, run TEST_EXE on it
                                                       # (exit 77 = skipped: no transformers)
Needs transformers and torch (CPU is enough). The committed fixtures were written with the
versions recorded in each ref.json.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77
TOKENS = [1, 5, 17, 33, 2, 99, 64, 120, 7, 7, 45, 88]  # 12 ids < vocab 128

BASE = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            rms_norm_eps=1e-6, tie_word_embeddings=False)


def cases():
    """(name, model_type, config overrides, weights-from case for refusals)."""
    c = []
    c.append(("llama_gqa", "llama", dict(rope_parameters=dict(rope_type="default", rope_theta=10000.0))))
    c.append(("llama_theta500k_tied", "llama",
              dict(rope_parameters=dict(rope_type="default", rope_theta=500000.0), tie_word_embeddings=True)))
    c.append(("llama_rope_llama3", "llama",
              dict(rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                                        high_freq_factor=4.0, original_max_position_embeddings=16))))
    c.append(("llama_rope_linear", "llama",
              dict(rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=4.0))))
    c.append(("llama_rope_yarn", "llama",
              dict(rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                        original_max_position_embeddings=16))))
    c.append(("llama_rope_yarn_mscale", "llama",
              dict(rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=8.0, beta_fast=16.0,
                                        beta_slow=2.0, mscale=1.0, mscale_all_dim=0.5,
                                        original_max_position_embeddings=32))))
    c.append(("llama_rope_dynamic", "llama",
              dict(rope_parameters=dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0))))
    c.append(("llama_rope_longrope", "llama",
              dict(rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, short_factor=[1.0, 1.5, 2.0, 3.0],
                                        long_factor=[2.0, 3.0, 5.0, 9.0], original_max_position_embeddings=16))))
    c.append(("llama_gelu_mlp_bias", "llama", dict(hidden_act="gelu", mlp_bias=True, attention_bias=True)))
    c.append(("llama_relu", "llama", dict(hidden_act="relu")))
    c.append(("llama_gelu_tanh_headdim", "llama", dict(hidden_act="gelu_pytorch_tanh", head_dim=16)))
    c.append(("mistral_window4", "mistral", dict(sliding_window=4)))
    c.append(("qwen2", "qwen2", dict()))
    c.append(("qwen3_qknorm", "qwen3", dict(head_dim=16)))
    c.append(("gemma", "gemma", dict(head_dim=16, hidden_act="gelu_pytorch_tanh", tie_word_embeddings=True)))
    c.append(("gemma2_softcap", "gemma2",
              dict(head_dim=16, sliding_window=4, query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
                   final_logit_softcapping=3.0, tie_word_embeddings=True)))
    c.append(("gemma3_text", "gemma3_text",
              dict(head_dim=16, sliding_window=4, query_pre_attn_scalar=24,
                   layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=True,
                   rope_parameters={"full_attention": dict(rope_type="default", rope_theta=1000000.0),
                                    "sliding_attention": dict(rope_type="default", rope_theta=10000.0)})))
    c.append(("gemma3_text_linear", "gemma3_text",
              dict(head_dim=16, sliding_window=4, query_pre_attn_scalar=16,
                   layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=True,
                   rope_parameters={"full_attention": dict(rope_type="linear", rope_theta=1000000.0, factor=8.0),
                                    "sliding_attention": dict(rope_type="default", rope_theta=10000.0)})))
    c.append(("phi3_window5", "phi3", dict(sliding_window=5, pad_token_id=0, bos_token_id=1, eos_token_id=2)))
    c.append(("phi3_longrope", "phi3",
              dict(pad_token_id=0, bos_token_id=1, eos_token_id=2,
                   rope_parameters=dict(rope_type="longrope", rope_theta=10000.0, short_factor=[1.0, 1.2, 2.5, 4.0],
                                        long_factor=[2.0, 3.0, 5.0, 9.0], original_max_position_embeddings=16))))
    c.append(("gpt2", "gpt2", dict()))
    c.append(("gpt2_relu", "gpt2", dict(activation_function="relu")))
    return c


REFUSALS = [
    # (name, base case, config edits, key the message must name)
    ("refuse_rope_proportional", "llama_gqa",
     dict(rope_parameters=dict(rope_type="proportional", rope_theta=10000.0, factor=4.0)),
     "rope_parameters.rope_type"),
    ("refuse_rope_unknown_t4", "llama_gqa",
     dict(rope_parameters=None, rope_theta=10000.0, rope_scaling=dict(type="ntk-by-parts", factor=2.0)),
     "rope_scaling.type"),
    ("refuse_gemma3_scaled_local_rope", "gemma3_text",
     dict(rope_parameters={"full_attention": dict(rope_type="default", rope_theta=1000000.0),
                           "sliding_attention": dict(rope_type="linear", rope_theta=10000.0, factor=2.0)}),
     "rope_parameters.sliding_attention.rope_type"),
    ("refuse_hidden_act", "llama_gqa", dict(hidden_act="gelu_10"), "hidden_act"),
    ("refuse_gpt2_act", "gpt2", dict(activation_function="quick_gelu"), "activation_function"),
    ("refuse_partial_rotary", "llama_gqa", dict(partial_rotary_factor=0.5), "partial_rotary_factor"),
    ("refuse_bidirectional", "gemma3_text", dict(use_bidirectional_attention=True), "use_bidirectional_attention"),
]


def randomize(model, torch, gemma_norms):
    g = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                std = 1.0 if "embed" in name or "wte" in name or "wpe" in name else p.shape[1] ** -0.5
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif "norm" in name or "ln_" in name:
                base = 0.0 if gemma_norms else 1.0
                if name.endswith("bias"):
                    base = 0.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))


def make_case(out, name, model_type, overrides):
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    if model_type == "gpt2":
        cfg = AutoConfig.for_model("gpt2", vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                   n_inner=64, **overrides)
    else:
        kw = dict(BASE)
        kw.update(overrides)
        cfg = AutoConfig.for_model(model_type, **kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    randomize(model, torch, model_type.startswith("gemma"))
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    ids = torch.tensor([TOKENS])
    with torch.no_grad():
        full = model(ids).logits[0].float()
        first = model(ids[:, :-1], use_cache=True)
        last = model(ids[:, -1:], past_key_values=first.past_key_values, use_cache=True).logits[0, -1].float()
    full.numpy().astype("<f4").tofile(os.path.join(d, "prefill.f32"))
    last.numpy().astype("<f4").tofile(os.path.join(d, "decode.f32"))
    ref = dict(tokens=TOKENS, vocab=int(full.shape[1]), transformers=transformers.__version__,
               torch=torch.__version__, model_type=model_type)
    with open(os.path.join(d, "ref.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


def make_refusal(out, name, base, edits, key):
    # Only the config: the refusal happens when config.json is read.
    src, d = os.path.join(out, base), os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    for k, v in edits.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(d, "ref.json"), "w") as f:
        json.dump(dict(refused_key=key), f)
        f.write("\n")


def generate(out):
    for name, mt, ov in cases():
        make_case(out, name, mt, ov)
    for name, base, edits, key in REFUSALS:
        make_refusal(out, name, base, edits, key)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--live", metavar="TEST_EXE")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"SKIP: transformers/torch not importable ({e}); the committed fixtures still run "
              "in test_core_hf_reference", file=sys.stderr)
        return SKIP
    if a.out:
        generate(a.out)
        return 0
    if a.live:
        with tempfile.TemporaryDirectory() as tmp:
            generate(tmp)
            env = dict(os.environ, QS_HF_REF_DIR=tmp)
            return subprocess.call([a.live], env=env)
    ap.error("give --out DIR or --live TEST_EXE")


if __name__ == "__main__":
    sys.exit(main())

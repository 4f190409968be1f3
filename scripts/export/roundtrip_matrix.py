"""The export round-trip matrix of docs/export.md: source format × architecture × target × plan
kind → does the ecosystem's loader take the file, and the perplexity difference it measures
against the same export with an F32 plan. Run by scripts/export/roundtrip_matrix.sh (which finds
the tools); this script runs with the transformers + compressed-tensors Python.

  GGUF         llama.cpp's llama-perplexity loads and scores it (ctx 128/256, 16 chunks)
  safetensors  compressed-tensors' QuantizationConfig schema (what vLLM's compressed-tensors
               support parses) and vLLM's rules (fused q/k/v and gate/up in one scheme, lm_head
               unquantised), then transformers + compressed-tensors load it (dequantize=True) and
               score it in torch on the same token ids (quantscope-cli's tokenizer; random-weight
               models without a tokenizer: ids from the text's bytes)
  refused      the export is refused (exit 2) with the reason shown

usage: roundtrip_matrix.py QUANTSCOPE_CLI LLAMACPP_BIN WORKDIR  (Markdown on stdout)"""
import json
import math
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI, LLAMA, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
TEXT = os.path.join(ROOT, "datasets/text/tinystories_validation_head.txt")
SHAKES = os.path.join(ROOT, "datasets/models/shakespeare-gpt2/heldout.txt")

PLANS = {
    "f32": {"defaults": {"weight": "f32"}},
    "int8 g32": {"defaults": {"weight": "int8-sym", "group_size": 32}},
    "int4 g32 attn + int8 mlp": {"defaults": {"weight": "int8-sym", "group_size": 32},
                                 "entries": [{"layers": ["blocks.*.attn.*"], "weight": "int4-sym", "group_size": 32}]},
    "int8 channel": {"defaults": {"weight": "int8-sym", "group_size": "channel"}},
    "int4 g32 asym": {"defaults": {"weight": "int4-asym", "group_size": 32}},
    "W8A8 int8-tok": {"defaults": {"weight": "int8-sym", "group_size": "channel", "activation": "int8-tok"}},
    "FP8 channel": {"defaults": {"weight": "fp8e4m3", "group_size": "channel"}},
    "mixed q int4 / k,v int8": {"defaults": {"weight": "int8-sym", "group_size": "channel"},
                                "entries": [{"layers": ["blocks.*.attn.q"], "weight": "int4-sym", "group_size": 32}]},
}


def plan_file(kind, down_f32=False):
    p = {"schema": "quantscope-plan", "version": 2, **json.loads(json.dumps(PLANS[kind]))}
    if down_f32:  # stories260K: K = 172 of mlp.down fits no 32-group
        p.setdefault("entries", []).append({"layers": ["blocks.*.mlp.down"], "weight": "f32"})
    path = os.path.join(WORK, re.sub(r"\W+", "_", kind) + ("_d" if down_f32 else "") + ".json")
    with open(path, "w") as f:
        json.dump(p, f)
    return path


def export(src, plan, to, out, extra=()):
    r = subprocess.run([CLI, "export", src, "--plan", plan, "--to", to, "-o", out, "--force", *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        line = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}"
        line = re.sub(r"^quantscope-cli: [^:]*: ", "", line)
        return False, line[:150]
    return True, ""


def llama_ppl(gguf, text, ctx):
    env = dict(os.environ, LD_LIBRARY_PATH=LLAMA)
    for _ in range(4):  # llama.cpp's threaded log sometimes loses its last line under load
        r = subprocess.run([os.path.join(LLAMA, "llama-perplexity"), "-m", gguf, "-f", text, "-c", str(ctx), "-b",
                            str(ctx), "--chunks", "16", "-t", "2"], capture_output=True, text=True, env=env)
        m = re.search(r"Final estimate: PPL = ([0-9.]+)", r.stdout + r.stderr)
        if m:
            return float(m.group(1))
        if "error" in (r.stderr or "").lower() and "failed to load" in (r.stderr or "").lower():
            return None
    return None


def token_ids(src, text, vocab):
    """Token ids of the text's head: quantscope-cli's tokenizer for the source, else bytes."""
    head = open(text, encoding="utf-8").read()[:8000]
    ids, pos = [], 0
    while pos < len(head) and len(ids) < 1024:  # pieces that fit any context, cut after a space
        end = head.rfind(" ", pos, pos + 500) if pos + 500 < len(head) else len(head)
        end = end if end > pos else min(len(head), pos + 500)
        r = subprocess.run([CLI, "generate", src, "--prompt", head[pos:end], "--tokens", "1", "--json"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return [b % vocab for b in head.encode()[:1024]]  # no tokenizer: the bytes
        piece = json.loads(r.stdout)["prompt_tokens"]
        ids += piece if not ids or piece[:1] != ids[:1] else piece[1:]  # one sequence start
        pos = end
    return ids[:1024]


def hf_check(folder, ids):
    """(loads, perplexity or None, note) for a compressed-tensors / dense HF folder."""
    import torch
    from transformers import AutoModelForCausalLM

    cfg = json.load(open(os.path.join(folder, "config.json")))
    note = []
    kwargs = {}
    if "quantization_config" in cfg:
        from compressed_tensors.quantization import QuantizationConfig
        from transformers.utils.quantization_config import CompressedTensorsConfig

        qc = cfg["quantization_config"]
        QuantizationConfig.model_validate(qc)
        note.append("schema ok")
        groups = {}
        for name, g in qc["config_groups"].items():
            for t in g["targets"]:
                groups[t] = name
        for t in qc.get("ignore", []):
            groups[t] = "ignore"
        fused = {}
        for mod, g in groups.items():
            m = re.match(r"(.*\.layers\.\d+)\.(self_attn\.[qkv]_proj|mlp\.(gate|up)_proj)$", mod)
            if m:
                fused.setdefault((m.group(1), "qkv" if "attn" in m.group(2) else "gu"), set()).add(g)
        uniform = all(len(v) == 1 for v in fused.values())
        head = any(re.search("lm_head|embed", m) and g != "ignore" for m, g in groups.items())
        note.append("vLLM rules " + ("ok" if uniform and not head else "NOT met"))
        asym = any(not g["weights"].get("symmetric", True) and (g.get("format") or qc["format"]) == "pack-quantized"
                   for g in qc["config_groups"].values())
        if asym:
            return "no (transformers 5.24 sizes packed zero points wrongly)", None, ", ".join(note)
        kwargs["quantization_config"] = CompressedTensorsConfig(dequantize=True)
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)
    except Exception as e:  # what the loader says is the matrix entry
        return "no (" + str(e).splitlines()[0][:80] + ")", None, ", ".join(note)
    model.eval()
    ctx = min(256, getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", 256))
    nll, n = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(ids) - 1, ctx):
            w = torch.tensor([ids[s:s + ctx]])
            if w.shape[1] < 2:
                break
            logits = model(w).logits[0, :-1].float()
            lp = torch.log_softmax(logits, -1)
            tgt = w[0, 1:]
            nll -= lp[torch.arange(len(tgt)), tgt].sum().item()
            n += len(tgt)
    return "yes", math.exp(nll / n), ", ".join(note)


def main():
    os.makedirs(WORK, exist_ok=True)
    sys.path.insert(0, os.path.join(ROOT, "scripts", "export"))
    tiny = os.path.join(WORK, "tiny")
    if not os.path.isdir(os.path.join(tiny, "llama")):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/export/make_tiny_hf_models.py"), tiny],
                       check=True, capture_output=True)
    stories = os.path.join(ROOT, "datasets/models/stories260K/stories260K.bin")
    gpt2 = os.path.join(ROOT, "datasets/models/shakespeare-gpt2/model.safetensors")
    rows = []

    def row(src_fmt, arch, target, kind, loads, diff, note=""):
        rows.append((src_fmt, arch, target, kind, loads, diff, note))

    # GGUF in llama.cpp.
    for src_fmt, arch, src, text, ctx, down in (("llama2.c", "llama (stories260K)", stories, TEXT, 256, True),
                                                 ("safetensors", "gpt2 (shakespeare-gpt2)", gpt2, SHAKES, 128, False)):
        base = None
        for kind in ("f32", "int8 g32", "int4 g32 attn + int8 mlp", "FP8 channel"):
            out = os.path.join(WORK, re.sub(r"\W+", "_", arch + kind) + ".gguf")
            ok, why = export(src, plan_file(kind, down), "gguf", out, ["--nearest"] if "FP8" in kind else [])
            if not ok:
                row(src_fmt, arch, "gguf", kind, "refused", "", why)
                continue
            p = llama_ppl(out, text, ctx)
            if kind == "f32":
                base = p
            diff = "" if p is None or base is None else f"{p:.4f} ({100 * (p / base - 1):+.2f} %)"
            row(src_fmt, arch, "gguf", kind + (" (nearest: Q8_0)" if "FP8" in kind else ""),
                "llama.cpp: yes" if p else "llama.cpp: no", diff)
    for arch in ("llama", "qwen2", "gemma", "phi3", "bert"):
        ok, why = export(os.path.join(tiny, arch), plan_file("int8 g32"), "gguf", os.path.join(WORK, arch + ".gguf"))
        row("safetensors", arch + " (tiny random)", "gguf", "int8 g32", "refused" if not ok else "written", "", why)

    # safetensors (compressed-tensors) in transformers + compressed-tensors.
    hf_sources = [("llama2.c", "llama (stories260K)", stories, TEXT, True)]
    hf_sources += [("safetensors", a + " (tiny random)", os.path.join(tiny, a), TEXT, False)
                   for a in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3")]
    hf_sources.append(("safetensors", "gpt2 (shakespeare-gpt2)", gpt2, SHAKES, False))
    for src_fmt, arch, src, text, down in hf_sources:
        cfgp = os.path.join(os.path.dirname(src) if src.endswith(".safetensors") else src, "config.json")
        vocab = json.load(open(cfgp))["vocab_size"] if os.path.exists(cfgp) else 512
        ids = token_ids(src, text, vocab)
        base = None
        for kind in ("f32", "int8 channel", "int4 g32 asym", "W8A8 int8-tok", "FP8 channel", "mixed q int4 / k,v int8"):
            out = os.path.join(WORK, re.sub(r"\W+", "_", arch + kind) + "_ct")
            extra = ["--nearest"] if kind.startswith("mixed") else []
            ok, why = export(src, plan_file(kind, down and "g32" in kind), "safetensors", out, extra)
            if not ok:
                row(src_fmt, arch, "safetensors", kind, "refused", "", why)
                if kind == "f32":
                    break
                continue
            loads, p, note = hf_check(out, ids)
            if kind == "f32":
                base = p
            diff = "" if p is None or base is None else f"{p:.3f} ({100 * (p / base - 1):+.2f} %)"
            row(src_fmt, arch, "safetensors", kind + (" (--nearest: q unified)" if extra else ""),
                "transformers: " + loads, diff, note)

    # compressed-tensors checkpoints as the source: re-exported with their own plan.
    for case in sorted(os.listdir(os.path.join(ROOT, "tests/data/ct_ref"))):
        src = os.path.join(ROOT, "tests/data/ct_ref", case)
        if not os.path.isdir(src):
            continue
        out = os.path.join(WORK, "re_" + case)
        r = subprocess.run([CLI, "export", src, "--to", "safetensors", "-o", out, "--force", "--no-vllm-rules"],
                           capture_output=True, text=True)
        if r.returncode:
            row("compressed-tensors", "llama (tiny, " + case + ")", "safetensors", "its own plan", "refused", "",
                r.stderr.strip()[-120:])
            continue
        ids = [b % 64 for b in open(TEXT, "rb").read()[:512]]
        l0, p0, _ = hf_check(src, ids)
        l1, p1, note = hf_check(out, ids)
        diff = "" if p0 is None or p1 is None else f"{p1:.4f} vs source {p0:.4f} ({100 * (p1 / p0 - 1):+.3f} %)"
        row("compressed-tensors", "llama (tiny, " + case + ")", "safetensors", "its own plan", "transformers: " + l1, diff,
            note)

    print("| source | architecture | target | plan | loads in | perplexity (vs the F32 export) | notes |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x).replace("|", "/") for x in r) + " |")


if __name__ == "__main__":
    main()

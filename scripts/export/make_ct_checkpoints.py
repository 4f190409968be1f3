"""Writes compressed-tensors checkpoints the way llm-compressor does — compressed-tensors' own
calculate_qparams and its registered compressors — from a tiny random Llama (transformers), one
folder per scheme, each with ref/<module>.f32: the module's weight as compressed-tensors'
decompress() returns it (float32). Quantscope's reader must decode every module to these values
(tests/core/test_core_export.cpp: ctCheckpointsFromCompressedTensors; committed copies in
tests/data/ct_ref for CI without transformers).
usage: make_ct_checkpoints.py OUTDIR"""
import json
import os
import sys

import torch
import transformers as tf
from compressed_tensors.compressors.base import BaseCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme
from compressed_tensors.quantization.utils import calculate_qparams
from safetensors.torch import save_file

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def scheme(weights, acts=None, targets=("Linear",)):
    return QuantizationScheme(targets=list(targets), weights=QuantizationArgs(**weights),
                              input_activations=QuantizationArgs(**acts) if acts else None)


# name → (format, [(scheme, scale dtype)], ignore)
CASES = {
    "w4a16_asym_g32": ("pack-quantized", [(scheme(dict(num_bits=4, type="int", symmetric=False, strategy="group",
                                                       group_size=32)), torch.float16)]),
    "w4_w8_regex": ("pack-quantized", [
        (scheme(dict(num_bits=4, type="int", symmetric=True, strategy="channel"), targets=["re:.*self_attn.*"]), torch.float16),
        (scheme(dict(num_bits=8, type="int", symmetric=True, strategy="group", group_size=32), targets=["re:.*mlp.*"]),
         torch.float16)]),
    "w8a8_int_asym": ("int-quantized", [(scheme(dict(num_bits=8, type="int", symmetric=False, strategy="channel"),
                                                dict(num_bits=8, type="int", symmetric=True, strategy="token",
                                                     dynamic=True)), torch.bfloat16)]),
    "fp8_dynamic": ("float-quantized", [(scheme(dict(num_bits=8, type="float", symmetric=True, strategy="channel"),
                                                dict(num_bits=8, type="float", symmetric=True, strategy="token",
                                                     dynamic=True)), torch.float32)]),
    "fp8_block": ("float-quantized", [(scheme(dict(num_bits=8, type="float", symmetric=True, strategy="block",
                                                   block_structure=[128, 128])), torch.float32)]),
    "naive_w8_tensor": ("naive-quantized", [(scheme(dict(num_bits=8, type="int", symmetric=True, strategy="tensor")),
                                             torch.float32)]),
}


def qparams(w, args):
    n, k = w.shape
    if args.strategy == "group":
        g = w.reshape(n, k // args.group_size, args.group_size)
        lo, hi = g.amin(-1), g.amax(-1)
    elif args.strategy == "channel":
        lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    elif args.strategy == "block":
        b = 128
        rows, cols = -(-n // b), -(-k // b)
        lo = torch.empty(rows, cols)
        hi = torch.empty(rows, cols)
        for r in range(rows):
            for c in range(cols):
                t = w[r * b:(r + 1) * b, c * b:(c + 1) * b]
                lo[r, c], hi[r, c] = t.min(), t.max()
    else:
        lo, hi = w.min().reshape(1), w.max().reshape(1)
    return calculate_qparams(lo, hi, args)


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    model = tf.LlamaForCausalLM(cfg)
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for name, (fmt, schemes) in CASES.items():
        folder = os.path.join(out, name)
        os.makedirs(os.path.join(folder, "ref"), exist_ok=True)
        tensors, groups = {}, {}
        for i, (sch, scale_dtype) in enumerate(schemes):
            groups[f"group_{i}"] = sch
        comp = BaseCompressor.get_value_from_registry(fmt)
        for key, w in sd.items():
            module = key[: -len(".weight")] if key.endswith(".weight") else None
            sch = scale_dtype = None
            if module and module.split(".")[-1] in LINEARS:
                for s, dt in schemes:
                    t = s.targets[0]
                    if t == "Linear" or (t.startswith("re:") and __import__("re").match(t[3:], module)):
                        sch, scale_dtype = s, dt
                        break
            if sch is None:
                tensors[key] = w.contiguous()
                continue
            scale, zp = qparams(w.float(), sch.weights)
            scale = scale.to(scale_dtype)
            state = {"weight": w.float(), "weight_scale": scale}
            if not sch.weights.symmetric:
                state["weight_zero_point"] = zp
            c = comp.compress(state, sch)
            for k2, v in c.items():
                tensors[f"{module}.{k2}"] = v.contiguous()
            ref = comp.decompress({k2: v for k2, v in c.items()}, sch)["weight"].float()
            ref.numpy().astype("float32").tofile(os.path.join(folder, "ref", module + ".f32"))
        save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        qc = QuantizationConfig(config_groups=groups, format=fmt, quantization_status="compressed",
                                ignore=["lm_head"])
        c = cfg.to_dict()
        c["quantization_config"] = qc.model_dump(mode="json")
        c["quantization_config"]["quant_method"] = "compressed-tensors"
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(c, f, indent=2, default=str)
        print(folder)


if __name__ == "__main__":
    main()

"""Checks a compressed-tensors folder written by `quantscope-cli export --to safetensors` with the
ecosystem's code: compressed-tensors' own QuantizationConfig schema (what vLLM's
compressed-tensors support parses), vLLM's loading rules (the members of a fused module —
q/k/v → qkv_proj, gate/up → gate_up_proj — in one config group or all ignored; lm_head and the
embeddings in no group unless EXPECT_HEAD is "head"), and transformers + compressed-tensors
loading the folder (dequantize=True; a mixed-precision folder — config groups with different
schemes — through compressed-tensors' own per-module decompression instead, see below): each
MODULE's weight equals the float32 values in FILE (Quantscope's decoding of the same module).
usage: check_ct_vllm.py DIR EXPECT_HEAD(head|nohead) [MODULE=FILE.f32 ...]"""
import json
import re
import sys

import numpy as np


def main():
    d, expect_head = sys.argv[1], sys.argv[2] == "head"
    cfg = json.load(open(d + "/config.json"))
    qc = cfg["quantization_config"]
    from compressed_tensors.quantization import QuantizationConfig

    QuantizationConfig.model_validate(qc)
    group_of = {}
    for name, g in qc["config_groups"].items():
        for t in g["targets"]:
            group_of[t] = name
    for t in qc.get("ignore", []):
        group_of[t] = "ignore"
    fused = {}
    for module, g in group_of.items():
        m = re.match(r"(.*\.layers\.\d+)\.(self_attn\.[qkv]_proj|mlp\.(gate|up)_proj)$", module)
        if m:
            kind = "qkv" if "self_attn" in m.group(2) else "gate_up"
            fused.setdefault((m.group(1), kind), set()).add(g)
    for key, groups in fused.items():
        assert len(groups) == 1, f"{key}: members in groups {groups} (vLLM fuses them)"
    head = [m for m in group_of if group_of[m] != "ignore" and re.search(r"lm_head|embed", m)]
    assert bool(head) == expect_head, f"lm_head/embeddings quantised: {head}"

    # Each quantised module decompressed by compressed-tensors' own compressor for its format
    # (the code transformers and llm-compressor run), against Quantscope's decoding.
    import torch
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from safetensors import safe_open

    want = dict(a.split("=", 1) for a in sys.argv[3:])
    checked, worst = 0, 0.0
    with safe_open(d + "/model.safetensors", "pt") as f:
        keys = list(f.keys())
        for gname, g in qc["config_groups"].items():
            fmt = g.get("format") or qc["format"]
            scheme = QuantizationScheme(
                targets=g["targets"], weights=QuantizationArgs(**g["weights"]),
                input_activations=QuantizationArgs(**g["input_activations"]) if g.get("input_activations") else None)
            comp = BaseCompressor.get_value_from_registry(fmt)
            for module in g["targets"]:
                sd = {k[len(module) + 1:]: f.get_tensor(k) for k in keys if k.startswith(module + ".")}
                wt = comp.decompress(sd, scheme)["weight"]
                w = wt.float().numpy().reshape(-1)
                if module in want:
                    ours = np.fromfile(want[module], dtype=np.float32)
                    assert w.size == ours.size, f"{module}: {w.size} vs {ours.size}"
                    # compressed-tensors computes (q - z)·s in the scale's dtype (FP16 for
                    # pack-quantized), we in FP32: equal within that dtype's rounding.
                    eps = float(torch.finfo(wt.dtype).eps) if wt.dtype.is_floating_point else 1e-7
                    diff = float(np.abs(w - ours).max())
                    bad = np.abs(w - ours) > eps * np.abs(ours) + 1e-12
                    assert not bad.any(), f"{module} ({fmt}, {wt.dtype}): max |diff| {diff} at {int(np.argmax(bad))}"
                    worst = max(worst, diff)
                    checked += 1
    assert checked == len(want), f"{checked} of {len(want)} modules found in config groups"
    # transformers + compressed-tensors load the folder (dequantised). transformers 5.24 cannot
    # load asymmetric pack-quantized checkpoints at all (it sizes weight_zero_point unpacked,
    # [N, groups], where compressed-tensors' own compress() writes it packed along dim 0, as we
    # do): that case is decoded above only.
    asym = any(not g["weights"].get("symmetric", True) and (g.get("format") or qc["format"]) == "pack-quantized"
               for g in qc["config_groups"].values())
    loaded = "skipped (asymmetric pack-quantized)"
    schemes = {json.dumps([g.get("format") or qc["format"], g["weights"], g.get("input_activations")], sort_keys=True)
               for g in qc["config_groups"].values()}
    if not asym and len(schemes) > 1:
        # Mixed precision (autoquant's output). transformers 5.24's dequantize=True converter
        # decompresses every dense module with the first config group's scheme
        # (integrations/compressed_tensors.py, get_dense_scheme), so it cannot load these; its
        # default path hands the folder to compressed-tensors, which applies each module's own
        # scheme and decompresses in the first forward pass. Each MODULE's weight is then read
        # back through its forward pass (x = I gives W^T) and compared with ours.
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
        with torch.no_grad():
            model(torch.tensor([[0, 1]]))
            for module, path in want.items():
                ours = np.fromfile(path, dtype=np.float32)
                lin = model.get_submodule(module)
                k = ours.size // lin.out_features
                w = lin(torch.eye(k)).T.float().numpy().reshape(-1)
                bad = np.abs(w - ours) > 2.0 ** -10 * np.abs(ours) + 1e-7  # FP16 scales' products
                assert not bad.any(), f"{module} as transformers loads it: max |diff| {float(np.abs(w - ours).max())}"
        loaded = f"{type(model).__name__} (mixed precision, per-module schemes; {len(want)} modules equal ours)"
    elif not asym:
        from transformers import AutoModelForCausalLM
        from transformers.utils.quantization_config import CompressedTensorsConfig

        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                     quantization_config=CompressedTensorsConfig(dequantize=True))
        loaded = type(model).__name__
    print(f"compressed-tensors schema ok, {len(fused)} fused groups uniform, head quantised: {expect_head}; "
          f"{checked} modules decompressed by compressed-tensors equal ours (max |diff| {worst:g}); "
          f"transformers: {loaded}")


if __name__ == "__main__":
    main()

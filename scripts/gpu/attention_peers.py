#!/usr/bin/env python3
"""Times torch's scaled_dot_product_attention on the shapes of `quantscope-cli bench attention`
(a causal prefill: T queries over keys 0..T-1, grouped-query heads), with the same method, so
the two tables can sit side by side (same device kind, same call).

Rows: every SDPA backend torch offers (flash, efficient, cudnn, math), each in FP32, FP16 and
BF16 where it runs. Ours computes FP32 scores, softmax and sums (the tensor-core kernels in
3xTF32); the FP32 rows are its like-for-like peers, the FP16/BF16 rows what a half-precision
engine pays. GQA: K and V are expanded to the query heads before timing (enable_gqa where torch
has it is used instead).

Method (as kernels/ops/attention_bench.h): random normal q, k, v; one eager call, then one CUDA
graph of 10 calls, 2 warm-up replays, the median of 15 replays divided by 10. FLOPs: 4 x head
size x heads x visible keys (causal), the same count as ours.

Usage (on the device machine): python3 scripts/gpu/attention_peers.py [--shapes T:H:KV:D,...]
[--json FILE]; default shapes: the 8B (512:32:8:128) and the 1B (512:32:8:64).
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

from peers import time_graph  # scripts/gpu/peers.py: the same graph timing


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="512:32:8:128,512:32:8:64")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--launches", type=int, default=10)
    p.add_argument("--json", help="also write the rows as JSON to this file")
    return p.parse_args()


def main():
    a = parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    print(f"Device:  {props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs), "
          f"torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"Method:  causal SDPA, one CUDA graph of {a.launches} calls, 2 warm-up replays, median of {a.repeats} "
          f"replays / calls; TFLOP/s from 4 x head size x heads x visible keys")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]
    torch.manual_seed(1)
    rows = []
    for spec in a.shapes.split(","):
        T, H, KV, D = (int(v) for v in spec.split(":"))
        flops = 4.0 * D * H * (T * (T + 1) / 2)
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            q = torch.randn(1, H, T, D, device=dev, dtype=dtype)
            k = torch.randn(1, KV, T, D, device=dev, dtype=dtype)
            v = torch.randn(1, KV, T, D, device=dev, dtype=dtype)
            ke, ve = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
            for name, backend in backends:
                row = dict(shape=spec, tokens=T, heads=H, kv_heads=KV, head_dim=D, dtype=str(dtype).split(".")[-1],
                           backend=name, us=None, tflops=None, note="")
                try:
                    with sdpa_kernel([backend]):
                        call = lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=True)
                        ms = time_graph(lambda i: call(), a.launches, a.repeats)
                    row["us"] = ms * 1e3
                    row["tflops"] = flops / (ms * 1e-3) / 1e12
                except Exception as e:  # a backend that does not take this dtype or shape
                    msg = str(e).strip().splitlines()[0][:90] if str(e).strip() else type(e).__name__
                    row["note"] = "not run: " + msg
                rows.append(row)
                torch.cuda.empty_cache()
    print()
    print(f"{'shape T:H:KV:D':<16}{'dtype':<10}{'backend':<11}{'us':>10}{'TFLOP/s':>9}  note")
    for r in rows:
        us = f"{r['us']:.1f}" if r["us"] else "-"
        tf = f"{r['tflops']:.1f}" if r["tflops"] else "-"
        print(f"{r['shape']:<16}{r['dtype']:<10}{r['backend']:<11}{us:>10}{tf:>9}  {r['note']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=props.name, torch=torch.__version__, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

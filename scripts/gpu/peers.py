#!/usr/bin/env python3
"""Times torch's built-in quantized GEMM peers on the shapes and m values of `quantscope-cli bench
gemm`, with the same method, and prints each as a ratio to torch's FP16 matmul measured in the
same run.

Peers (y[m, n] = x[m, k] . W[n, k]^T):
  torch-fp16       F.linear, FP16 x and W (cuBLAS; the baseline of every ratio)
  torch-bf16       F.linear, BF16 (tinygemm's activation type)
  tinygemm-int4    torch._weight_int4pack_mm: INT4 weights with group-128 BF16 scales and zeros
                   (torch._convert_weight_to_int4pack, inner_k_tiles 8), BF16 activations
  scaled_mm-fp8    torch._scaled_mm, E4M3 x and W, row-wise FP32 scales (per token x per
                   channel), BF16 out. Activation quantization not included.
  scaled_mm-fp8-fa the same with use_fast_accum=True (no FP32 promotion of the tensor cores' sums;
                   compare with `quantscope-cli --fp8-accum fast`).
  int_mm-int8      torch._int_mm, INT8 x and W, INT32 out, unscaled. Not included: activation
                   quantization and the scale epilogue.
Where a peer rejects m (torch._int_mm needs m > 16; torch._scaled_mm wants dimensions that are
multiples of 16) it runs with m rounded up (to 32 for _int_mm, to a multiple of 16 for _scaled_mm) and the
row says so; the ratio is still against FP16 at the real m.

Method (as kernels/gemm/gemm_bench.h): per (shape, m, peer) R = max(4, ceil(3 x L2 / weight
bytes)) copies of the weight; one CUDA graph of L >= 20 calls cycling through the copies; 2
warm-up replays, then the median of 15 replays between CUDA events, divided by L.

Usage (on the device machine): python3 scripts/gpu/peers.py [--shapes 8192x8192,...]
[--batch 1,16,128,512,4096] [--json FILE]
"""
import argparse
import json
import math
import statistics
import sys

import torch
import torch.nn.functional as F


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="8192x8192,4096x4096,14336x4096,4096x14336")
    p.add_argument("--batch", default="1,16,128,512,4096")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--min-launches", type=int, default=20)
    p.add_argument("--group", type=int, default=128, help="tinygemm group size")
    p.add_argument("--json", help="also write the rows as JSON to this file")
    return p.parse_args()


def copies_for(weight_bytes, l2):
    return max(4, math.ceil(3 * max(l2, 50 << 20) / weight_bytes))


def time_graph(calls, launches, repeats):
    """Median ms per call of a CUDA graph holding `launches` calls (calls(i) makes call i)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # eager warm-up outside the capture (workspaces, heuristics)
        for i in range(launches):
            calls(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(launches):
            calls(i)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for r in range(repeats + 2):
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        if r >= 2:
            ms.append(start.elapsed_time(stop))
    del graph
    return statistics.median(ms) / launches


def main():
    a = parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    batches = [int(b) for b in a.batch.split(",")]
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    print(f"Device:  {props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, "
          f"L2 {l2 >> 20} MiB), torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(f"Method:  per (shape, m, peer) R = max(4, ceil(3 x L2 / weight bytes)) weight copies, one CUDA graph "
          f"of >= {a.min_launches} calls cycling through them, 2 warm-up replays, median of {a.repeats} "
          f"replays / calls; ratio = torch FP16 F.linear time / peer time, same shape and m, same run")
    torch.manual_seed(0)
    rows = []

    def run(label, n, k, m, weight_bytes, make_weight, make_call, note=""):
        copies = copies_for(weight_bytes, l2)
        launches = copies * math.ceil(a.min_launches / copies)
        try:
            ws = [make_weight() for _ in range(copies)]
            call = make_call(ws)
            ms = time_graph(call, launches, a.repeats)
            rows.append(dict(shape=f"{n}x{k}", n=n, k=k, m=m, peer=label, us=ms * 1e3, copies=copies, note=note))
        except Exception as e:  # a peer that does not run here: say why, carry on
            msg = str(e).strip().splitlines()[0][:100] if str(e).strip() else type(e).__name__
            rows.append(dict(shape=f"{n}x{k}", n=n, k=k, m=m, peer=label, us=None, copies=copies, note="error: " + msg))
        finally:
            torch.cuda.empty_cache()

    for n, k in shapes:
        mmax = max(batches)
        x16 = torch.randn(max(mmax, 32), k, device=dev, dtype=torch.float16)
        xbf = x16.to(torch.bfloat16)
        x8 = torch.randint(-127, 128, (max(mmax, 32), k), device=dev, dtype=torch.int8)
        xf8 = (torch.randn(max(mmax, 32), k, device=dev) * 0.5).to(torch.float8_e4m3fn)
        sa = torch.rand(max(mmax, 32), 1, device=dev, dtype=torch.float32) * 0.01 + 0.001
        sb = torch.rand(1, n, device=dev, dtype=torch.float32) * 0.01 + 0.001
        for m in batches:
            run("torch-fp16", n, k, m, n * k * 2,
                lambda: torch.randn(n, k, device=dev, dtype=torch.float16) * 0.02,
                lambda ws: (lambda i: F.linear(x16[:m], ws[i % len(ws)])))
            run("torch-bf16", n, k, m, n * k * 2,
                lambda: torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02,
                lambda ws: (lambda i: F.linear(xbf[:m], ws[i % len(ws)])))
            g = a.group

            def int4_weight():
                q = torch.randint(0, 16, (n, k), device=dev, dtype=torch.int32)
                packed = ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8)
                w = torch._convert_weight_to_int4pack(packed, 8)
                sz = (torch.rand(k // g, n, 2, device=dev, dtype=torch.float32) * 0.01).to(torch.bfloat16)
                return (w, sz)
            run("tinygemm-int4", n, k, m, n * k // 2 + (k // g) * n * 4, int4_weight,
                lambda ws: (lambda i: torch._weight_int4pack_mm(xbf[:m], ws[i % len(ws)][0], g, ws[i % len(ws)][1])),
                note=f"g{g}, bf16 x")
            mf = m if m % 16 == 0 else ((m + 15) // 16) * 16
            run("scaled_mm-fp8", n, k, m, n * k + n * 4,
                lambda: (torch.randn(n, k, device=dev) * 0.5).to(torch.float8_e4m3fn),
                lambda ws: (lambda i: torch._scaled_mm(xf8[:mf], ws[i % len(ws)].t(), scale_a=sa[:mf], scale_b=sb,
                                                       out_dtype=torch.bfloat16)),
                note="rowwise scales, bf16 out" + (f", m padded to {mf}" if mf != m else ""))
            run("scaled_mm-fp8-fa", n, k, m, n * k + n * 4,
                lambda: (torch.randn(n, k, device=dev) * 0.5).to(torch.float8_e4m3fn),
                lambda ws: (lambda i: torch._scaled_mm(xf8[:mf], ws[i % len(ws)].t(), scale_a=sa[:mf], scale_b=sb,
                                                       out_dtype=torch.bfloat16, use_fast_accum=True)),
                note="as scaled_mm-fp8, use_fast_accum=True" + (f", m padded to {mf}" if mf != m else ""))
            mi = m if m > 16 else 32
            run("int_mm-int8", n, k, m, n * k,
                lambda: torch.randint(-127, 128, (n, k), device=dev, dtype=torch.int8),
                lambda ws: (lambda i: torch._int_mm(x8[:mi], ws[i % len(ws)].t())),
                note="int32 out, unscaled" + (f", m padded to {mi}" if mi != m else ""))
        del x16, xbf, x8, xf8

    base = {(r["shape"], r["m"]): r["us"] for r in rows if r["peer"] == "torch-fp16"}
    print()
    print(f"{'shape NxK':<12}{'m':>6}  {'peer':<17}{'us':>10}{'x fp16':>8}{'copies':>7}  note")
    for r in rows:
        b = base.get((r["shape"], r["m"]))
        r["speedup_vs_torch_fp16"] = (b / r["us"]) if (b and r["us"]) else None
        us = f"{r['us']:.1f}" if r["us"] else "-"
        ratio = f"{r['speedup_vs_torch_fp16']:.2f}" if r["speedup_vs_torch_fp16"] else "-"
        print(f"{r['shape']:<12}{r['m']:>6}  {r['peer']:<17}{us:>10}{ratio:>8}{r['copies']:>7}  {r['note']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=props.name, torch=torch.__version__, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

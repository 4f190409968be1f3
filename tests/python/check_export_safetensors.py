"""Checks a folder written by `quantscope-cli export --to safetensors` (compressed-tensors layout)
with the safetensors package: config.json's quantization_config, the tensors each layer's group
needs with their dtypes and shapes, and, for each MODULE=FILE.f32 argument, that the weight
unpacked and dequantised here (numpy, following the compressed-tensors description: values packed
along the last dim of int32 words, 32/bits per word, lowest bits first, stored as q + 2^(bits-1);
zero points packed the same way along dim 0; value = (q - z) * scale) equals FILE's values.
FP8 tensors: the safetensors package's numpy backend has no float8 type, so their bytes are
read from the offsets safetensors reports and decoded here (E4M3: bias 7, no infinities).
usage: check_export_safetensors.py DIR [MODULE=FILE.f32 ...]"""
import json
import struct
import sys

import numpy as np
from safetensors import safe_open


def e4m3_to_float(b):
    b = b.astype(np.int64)
    sign = np.where(b >> 7, -1.0, 1.0)
    e = (b >> 3) & 15
    m = b & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7))
    v = np.where((e == 15) & (m == 7), np.nan, v)
    return (sign * v).astype(np.float32)


def unpack(words, bits, axis):
    pf = 32 // bits
    mask = (1 << bits) - 1
    u = words.view(np.uint32).astype(np.int64)
    if axis == 1:
        out = np.zeros((u.shape[0], u.shape[1] * pf), np.int64)
        for i in range(pf):
            out[:, i::pf] = (u >> (bits * i)) & mask
    else:
        out = np.zeros((u.shape[0] * pf, u.shape[1]), np.int64)
        for i in range(pf):
            out[i::pf, :] = (u >> (bits * i)) & mask
    return out - (1 << (bits - 1))


def main():
    d = sys.argv[1]
    cfg = json.load(open(d + "/config.json"))
    qc = cfg["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors"
    assert qc["quantization_status"] == "compressed"
    groups = qc["config_groups"]
    formats = {g["format"] for g in groups.values()}
    assert qc["format"] == (formats.pop() if len(formats) == 1 else "mixed-precision"), qc["format"]
    group_of = {}
    for g in groups.values():
        for t in g["targets"]:
            assert t not in group_of, f"{t} in two groups"
            group_of[t] = g
    path = d + "/model.safetensors"
    with open(path, "rb") as fh:
        raw = fh.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    counts = {}
    with safe_open(path, framework="numpy") as f:
        keys = set(f.keys())

        def tensor(name, dtype):
            assert name in keys, f"missing {name}"
            sl = f.get_slice(name)
            assert sl.get_dtype() == dtype, f"{name}: dtype {sl.get_dtype()}, expected {dtype}"
            if dtype.startswith("F8"):
                b, e = header[name]["data_offsets"]
                return np.frombuffer(raw[base + b:base + e], np.uint8).reshape(sl.get_shape())
            return f.get_tensor(name)

        for arg in sys.argv[2:]:
            module, fpath = arg.split("=", 1)
            ours = np.fromfile(fpath, dtype=np.float32)
            g = group_of.get(module)
            if g is None:
                assert module in qc["ignore"], f"{module} neither in a group nor ignored"
                w = f.get_tensor(module + ".weight").astype(np.float32)
                kind = "dense"
            else:
                wa = g["weights"]
                bits = wa["num_bits"]
                kind = f'{g["format"]} {wa["type"]}{bits} {wa["strategy"]} {"sym" if wa["symmetric"] else "asym"}'
                if g["format"] == "pack-quantized":
                    assert wa["type"] == "int" and bits in (4, 8)
                    N, K = (int(x) for x in tensor(module + ".weight_shape", "I64"))
                    packed = tensor(module + ".weight_packed", "I32")
                    pf = 32 // bits
                    assert packed.shape == (N, (K + pf - 1) // pf), packed.shape
                    q = unpack(packed, bits, 1)[:, :K]
                    scale = tensor(module + ".weight_scale", "F16").astype(np.float32)
                    G = scale.shape[1]
                    gs = K // G
                    if wa["strategy"] == "group":
                        assert gs == wa["group_size"], (gs, wa["group_size"])
                    else:
                        assert wa["strategy"] == "channel" and G == 1
                    if wa["symmetric"]:
                        z = np.zeros_like(scale, dtype=np.int64)
                        assert module + ".weight_zero_point" not in keys
                    else:
                        zp = tensor(module + ".weight_zero_point", "I32")
                        assert zp.shape == ((N + pf - 1) // pf, G), zp.shape
                        z = unpack(zp, bits, 0)[:N]
                    w = (q - np.repeat(z, gs, axis=1)).astype(np.float32) * np.repeat(scale, gs, axis=1)
                elif g["format"] == "float-quantized":
                    assert wa["type"] == "float" and bits == 8
                    v = e4m3_to_float(tensor(module + ".weight", "F8_E4M3"))
                    N, K = v.shape
                    s = tensor(module + ".weight_scale", "F32")
                    if wa["strategy"] == "tensor":
                        assert s.shape == (1,)
                        w = v * s[0]
                    elif wa["strategy"] == "channel":
                        assert s.shape == (N, 1)
                        w = v * s
                    else:
                        raise AssertionError("strategy " + wa["strategy"])
                elif g["format"] == "int-quantized":
                    v = tensor(module + ".weight", "I8").astype(np.float32)
                    s = tensor(module + ".weight_scale", "F32")
                    w = v * np.repeat(s, v.shape[1] // s.shape[1], axis=1)
                else:
                    raise AssertionError("format " + g["format"])
            w = w.reshape(-1)
            assert w.size == ours.size, f"{module}: {w.size} vs {ours.size}"
            if not np.array_equal(w, ours):
                i = int(np.argmax(np.abs(w - ours)))
                raise AssertionError(f"{module} ({kind}): element {i} is {w[i]} here, {ours[i]} in Quantscope")
            counts[kind] = counts.get(kind, 0) + 1
    print(f"safetensors: {len(keys)} tensors; layers equal bit for bit: {counts}")


main()

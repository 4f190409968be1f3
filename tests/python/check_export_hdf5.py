"""Checks an HDF5 archive written by `quantscope-cli export --to hdf5` with h5py: the root
attributes, the plan JSON, and for each NAME=FILE.f32 argument that the layer's packed payload,
FP16 scales and zero points, decoded here with numpy from the layout described in
docs/export.md (INT4 two codes per byte along K, low nibble first, symmetric codes offset by 8;
zero points packed the same way over the scale cells), equal FILE's values; and the calibration
statistics (histogram counts = tokens x channels, absmax = max of the channel maxima).
usage: check_export_hdf5.py FILE.h5 [NAME=FILE.f32 ...]"""
import json
import sys

import h5py
import numpy as np


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def e4m3(b):
    b = b.astype(np.int64)
    e, m = (b >> 3) & 15, b & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7))
    return (np.where(b >> 7, -1.0, 1.0) * v).astype(np.float32)


def nibbles(b, n):
    out = np.zeros(b.shape[:-1] + (b.shape[-1] * 2,), np.int64)
    out[..., 0::2] = b & 15
    out[..., 1::2] = b >> 4
    return out[..., :n]


def decode(g):
    a = g.attrs
    kind, rows, cols = text(a["kind"]), int(a["rows"]), int(a["cols"])
    payload = g["payload"][()]
    assert payload.dtype == np.uint8 and payload.shape[0] == rows
    if kind in ("fp16", "bf16", "f32"):
        if kind == "fp16":
            return payload.view("<f2").astype(np.float32)
        if kind == "bf16":
            return (payload.view("<u2").astype(np.uint32) << 16).view(np.float32)
        return payload.view("<f4")
    scales = g["scales"][()]
    assert scales.dtype == np.float16, scales.dtype
    scales = scales.astype(np.float32).reshape(-1)
    sym = bool(a["symmetric"])
    ncell = int(a["grid_rows"]) * int(a["grid_cols"])
    if kind == "int4":
        u = nibbles(payload, cols)
        q = u - 8 if sym else u
    elif kind == "int8":
        q = payload.view(np.int8).astype(np.int64) if sym else payload.astype(np.int64)
    elif kind == "fp8e4m3":
        q = e4m3(payload)
    else:
        raise AssertionError("kind " + kind)
    if sym:
        z = np.zeros(ncell, np.int64)
        assert "zero_points" not in g
    else:
        zb = g["zero_points"][()]
        z = nibbles(zb, ncell) if kind == "int4" else zb.astype(np.int64)
    i = np.arange(rows)[:, None] // int(a["cell_rows"])
    j = np.arange(cols)[None, :] // int(a["cell_cols"])
    cell = i * int(a["grid_cols"]) + j
    return (q - z[cell]).astype(np.float32) * scales[cell]


def main():
    f = h5py.File(sys.argv[1], "r")
    assert text(f.attrs["format"]) == "quantscope-export" and int(f.attrs["format_version"]) == 1
    plan = json.loads(text(f["plan"][()]))
    assert plan["schema"] == "quantscope-plan", plan.keys()
    json.loads(text(f["config"][()]))
    kinds = {}
    for arg in sys.argv[2:]:
        name, path = arg.split("=", 1)
        ours = np.fromfile(path, dtype=np.float32)
        g = f["tensors"][name]
        w = decode(g).reshape(-1)
        if not np.array_equal(w, ours):
            i = int(np.argmax(np.abs(w - ours)))
            raise AssertionError(f"{name} ({text(g.attrs['format'])}): element {i} is {w[i]} here, {ours[i]} in Quantscope")
        k = text(g.attrs["format"])
        kinds[k] = kinds.get(k, 0) + 1
        c = f["calibration"][name]
        ch = c["channel_absmax"][()]
        assert ch.size == int(g.attrs["cols"])
        assert c["histogram"][()].sum() == int(c.attrs["tokens"]) * ch.size
        assert abs(float(ch.max()) - float(c.attrs["absmax"])) <= 1e-6 * float(ch.max())
        assert c["channel_mean_square"][()].shape == ch.shape
    others = [n for n in f["tensors"] if "values" in f["tensors"][n]]
    print(f"h5py: {len(f['tensors'])} tensors ({len(others)} unquantised); layers equal: {kinds}")


main()

"""Every tensor of the source is in the export (issue 26, item 4). For each Hugging Face model
folder given, exports it with `quantscope-cli export` to safetensors (compressed-tensors),
HDF5 and GGUF under an INT8 per-channel plan, then reads source and export with the
ecosystem's readers (the safetensors package, h5py, gguf-py) and checks:
  safetensors  every source tensor is there by name, or its module's compressed form
               (M.weight → M.weight_packed / M.weight + M.weight_scale); integer tensors byte-equal
  hdf5         /tensors/* source_name attributes are exactly the source's names; integer tensors
               equal
  gguf         as many tensors as the source (a GGUF refusal, exit 2 with its reason, is listed)
usage: check_export_tensor_lists.py QUANTSCOPE_CLI WORKDIR MODEL_DIR...
Prints one line per model × format; exit 1 on any missing or changed tensor."""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
from safetensors import safe_open

PLAN = {"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "int8-sym", "group_size": "channel"}}
INT_DTYPES = ("I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64", "BOOL")


def source_tensors(folder):
    out = {}
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    for name in files:
        with safe_open(os.path.join(folder, name), "np") as f:
            for k in f.keys():
                sl = f.get_slice(k)
                dt = sl.get_dtype()
                out[k] = (dt, f.get_tensor(k) if dt in INT_DTYPES else None)
    return out


def check_safetensors(src, out_dir):
    names = {}
    with safe_open(os.path.join(out_dir, "model.safetensors"), "np") as f:
        for k in f.keys():
            names[k] = f.get_slice(k).get_dtype()
        missing, changed = [], []
        for k, (dt, ints) in src.items():
            module = k[: -len(".weight")] if k.endswith(".weight") else None
            if k in names:
                if ints is not None and (names[k] != dt or not np.array_equal(f.get_tensor(k), ints)):
                    changed.append(k)
            elif not (module and module + ".weight_packed" in names):
                missing.append(k)
    return missing, changed, len(names)


def check_hdf5(src, path):
    with h5py.File(path, "r") as h:
        got = {}
        for key, g in h["tensors"].items():
            got[g.attrs["source_name"]] = g
        missing = [k for k in src if k not in got]
        changed = []
        for k, (dt, ints) in src.items():
            if ints is None or k not in got:
                continue
            g = got[k]
            vals = g["values"][()] if "values" in g else np.frombuffer(g["bytes"][()].tobytes(), dtype=ints.dtype)
            if not np.array_equal(np.asarray(vals).reshape(-1), ints.reshape(-1)):
                changed.append(k)
        extra = [k for k in got if k not in src]
        return missing, changed + extra, len(got)


def check_gguf(src, path):
    from gguf import GGUFReader

    r = GGUFReader(path)
    n = len(r.tensors)
    return ([] if n == len(src) else [f"{len(src)} source tensors, {n} in the GGUF"]), [], n


def main():
    cli, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    plan = os.path.join(work, "plan.json")
    with open(plan, "w") as f:
        json.dump(PLAN, f)
    bad = 0
    for folder in sys.argv[3:]:
        name = os.path.basename(os.path.normpath(folder))
        src = source_tensors(folder)
        for fmt in ("safetensors", "hdf5", "gguf"):
            out = os.path.join(work, f"{name}.{fmt}")
            args = [cli, "export", folder, "--plan", plan, "--to", fmt, "-o", out, "--force"]
            if fmt == "gguf":
                args.append("--nearest")
            p = subprocess.run(args, capture_output=True, text=True)
            if p.returncode != 0:
                reason = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "?"
                if p.returncode == 2:  # a refusal, with its reason: nothing written, nothing lost
                    print(f"{name:28s} {fmt:12s} refused: {reason[:160]}")
                    continue
                print(f"{name:28s} {fmt:12s} FAILED (exit {p.returncode}): {reason}")
                bad += 1
                continue
            check = {"safetensors": check_safetensors, "hdf5": check_hdf5, "gguf": check_gguf}[fmt]
            missing, changed, n = check(src, out)
            ints = sum(1 for v in src.values() if v[1] is not None)
            status = "ok" if not missing and not changed else "MISSING " + ", ".join(missing[:5]) + \
                (" CHANGED " + ", ".join(changed[:5]) if changed else "")
            print(f"{name:28s} {fmt:12s} {len(src)} source tensors ({ints} integer) -> {n} stored: {status}")
            bad += status != "ok"
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

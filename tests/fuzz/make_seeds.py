"""Regenerates the committed seed corpora in tests/fuzz/corpus/<target>/ (small files, each a
valid example of what the reader accepts, so the fuzzer starts from deep inside the formats).

usage: QS_PYTHON tests/fuzz/make_seeds.py [CLI]   (needs numpy, gguf, safetensors, tokenizers, h5py)

The session seeds are made by quantscope-cli (CLI, default build/bin/quantscope-cli): calibrate,
sensitivity and accumulate on the tiny llama2.c model of tests/data/bad, then shrunk with h5py
(histograms rebinned to 8 bins, two layers kept) so that each stays under the fuzzer's max_len."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))
import make_gguf_fixture as gf  # noqa: E402
import make_safetensors_fixture as sf  # noqa: E402
import gguf  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402


def out(target, name):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, name)


def gguf_seeds(tmp):
    gf.write_quant(tmp)
    shutil.copy(os.path.join(tmp, "quant.gguf"), out("gguf", "all_types.gguf"))
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(out("gguf", "tiny_llama.gguf"), "llama")
    gf.tiny_llama_vocab(w)
    d, ff = 32, 32
    for k, v in (("context_length", 16), ("embedding_length", d), ("block_count", 1), ("feed_forward_length", ff)):
        w.add_uint32("llama." + k, v)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_tensor("token_embd.weight", gguf.quants.quantize(rng.standard_normal((263, d)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    p = "blk.0."
    w.add_tensor(p + "attn_norm.weight", np.ones(d, np.float32))
    w.add_tensor(p + "ffn_norm.weight", np.ones(d, np.float32))
    for n, o, i in (("attn_q", d, d), ("attn_k", 16, d), ("attn_v", 16, d), ("attn_output", d, d), ("ffn_gate", ff, d), ("ffn_up", ff, d), ("ffn_down", d, ff)):
        w.add_tensor(p + n + ".weight", gguf.quants.quantize(rng.standard_normal((o, i)).astype(np.float32), gguf.GGMLQuantizationType.Q4_0), raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def safetensors_seeds(tmp):
    sf.write_dtypes(tmp)
    shutil.copy(os.path.join(tmp, "lib.safetensors"), out("safetensors", "lib.safetensors"))
    shutil.copy(os.path.join(tmp, "raw.safetensors"), out("safetensors", "raw.safetensors"))
    rng = np.random.default_rng(2)
    save_file({"wte.weight": rng.standard_normal((8, 4)).astype(np.float16),
               "h.0.attn.c_attn.weight": rng.standard_normal((4, 12)).astype(np.float32),
               "h.0.attn.bias": np.ones((1, 1, 2, 2), np.float32)},
              out("safetensors", "gpt2ish.safetensors"), metadata={"format": "pt"})
    with open(out("safetensors", "index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 64}, "weight_map": {"a": "lib.safetensors"}}, f)


def llama2c_seeds():
    # dim 8, hidden 12, 1 layer, 2 heads, 1 kv head, vocab 16, seq 4: legacy and version-1 headers
    d, hd, L, H, KV, V, S = 8, 12, 1, 2, 1, 16, 4
    head = d // H
    kv = head * KV
    rng = np.random.default_rng(3)
    def w(*shape):
        return rng.standard_normal(shape).astype(np.float32).tobytes()
    legacy = struct.pack("<7i", d, hd, L, H, KV, V, S)
    legacy += w(V, d) + w(L, d) + w(L, d, d) + w(L, kv, d) + w(L, kv, d) + w(L, d, d) + w(L, d) + w(L, hd, d) + w(L, d, hd) + w(L, hd, d) + w(d) + w(S, head // 2) + w(S, head // 2)
    open(out("llama2c", "legacy.bin"), "wb").write(legacy)
    v1 = struct.pack("<Ii7iB", 0x616B3432, 1, d, hd, L, H, KV, V, S, 1)
    v1 += b"\0" * (256 - len(v1))
    v1 += w(L, d) + w(L, d) + w(d) + w(V, d) + w(L, d, d) + w(L, kv, d) + w(L, kv, d) + w(L, d, d) + w(L, hd, d) + w(L, d, hd) + w(L, hd, d)
    open(out("llama2c", "v1.bin"), "wb").write(v1)


def tokenizer_seeds(tmp):
    # first byte 0: a tokenizer file; 1: text
    tok512 = open(os.path.join(ROOT, "datasets", "models", "stories260K", "tok512.bin"), "rb").read()
    open(out("tokenizer", "tok512.bin"), "wb").write(b"\0" + tok512)
    subprocess.check_call([sys.executable, os.path.join(ROOT, "tests", "fixtures", "make_tokenizer_fixture.py"),
                           os.path.join(tmp, "tk"), os.path.join(ROOT, "datasets", "text", "tinyshakespeare.txt")])
    for style in ("gpt2", "llama3"):
        for name in ("tokenizer.json", "vocab.gguf"):
            data = open(os.path.join(tmp, "tk", style, name), "rb").read()
            open(out("tokenizer", f"{style}_{name}"), "wb").write(b"\0" + data)
    for i, text in enumerate(["Once upon a time, there was a little girl.", "naïve 🦙 <s> </s>\n\t  x", "\xff\xfe bytes"]):
        open(out("tokenizer", f"text{i}"), "wb").write(b"\1" + text.encode("utf-8", "surrogateescape"))


def plan_seeds():
    stories_hash = "xxh3-64-sampled:53aa64a0f6a8f5c8"
    v2 = {"schema": "quantscope-plan", "version": 2, "name": "mixed", "description": "auto: budget 4.5 bits/weight",
          "model": {"name": "stories260K", "hash": stories_hash, "architecture": "llama",
                    "linear_layers": 35, "parameters": 226560},
          "defaults": {"weight": "int8-sym", "group_size": "channel", "scale": "absmax", "activation": "f32",
                       "method": "rtn", "smooth_alpha": None},
          "entries": [
              {"layers": ["blocks.*.attn.{q,k}", "blocks.0-2.mlp.down"], "weight": "int4-asym", "group_size": 32,
               "scale": "mse", "method": "gptq", "note": "attention"},
              {"layers": "layers.4.feed_forward.w2.weight", "weight": "fp16"},
              {"layers": ["blocks.?.mlp.up"], "weight": "fp8e4m3", "activation": "fp8e4m3-tok"},
              {"layers": ["blocks.1.attn.o"], "weight": "int8-sym", "activation": "int8-tok", "smooth_alpha": 0.5},
              {"layers": ["blocks.3.mlp.gate"], "weight": "int4-sym", "group_size": 64, "method": "awq"}]}
    with open(out("plan", "v2_mixed.json"), "w") as f:
        json.dump(v2, f, indent=1)
    with open(out("plan", "v2_minimal.json"), "w") as f:
        json.dump({"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "int8-sym", "group_size": "channel"},
                   "entries": []}, f)
    v1 = {"quantscope_plan": 1, "name": "old", "model": "stories260K", "model_hash": stories_hash,
          "default_format": "int8-ch-sym",
          "layers": [{"match": "blocks.*.attn.*", "format": "int4-g64-asym-mse:int8-tok", "note": "n"},
                     {"match": "layers.4.feed_forward.w2.weight", "format": "fp16"}]}
    with open(out("plan", "v1_migrated.json"), "w") as f:
        json.dump(v1, f)
    # The refused plans of both hostile corpora (the memory bombs are too big for max_len).
    for corpus in ("bad", "bad2"):
        d = os.path.join(ROOT, "tests", "data", corpus)
        for name in sorted(os.listdir(d)):
            if name.startswith("plan_") and name.endswith(".json"):
                shutil.copy(os.path.join(d, name), out("plan", f"{corpus}_{name}"))


def session_seeds(tmp, cli):
    model = os.path.join(ROOT, "tests", "data", "bad", "l2c_tiny.bin")
    tok = os.path.join(ROOT, "datasets", "models", "stories260K", "tok512.bin")
    full = os.path.join(tmp, "full.qsession")
    common = ["--backend", "cpu", "--tokenizer", tok, "--tokens", "32", "--session", full]
    for cmd in (["calibrate", model], ["sensitivity", model, "--formats", "int4-g32-sym,int8-ch-sym"],
                ["accumulate", model, "--format", "int8-ch-sym", "--name", "w8"]):
        subprocess.check_call([cli, cmd[0]] + common[:2] + cmd[1:] + common[2:], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)

    def copy(src, dst, keep_layers):
        for k in src.attrs:
            dst.attrs.create(k, src.attrs[k], dtype=src.attrs.get_id(k).dtype)
        for k, item in src.items():
            if isinstance(item, h5py.Group):
                if src.name == "/calibration/layers" and int(k) >= keep_layers:
                    continue
                gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
                gcpl.set_obj_track_times(False)
                h5py.h5g.create(dst.id, k.encode(), gcpl=gcpl)
                copy(item, dst[k], keep_layers)
            else:
                data = item[()]
                if k == "counts" and data.shape[0] > 8:  # rebin a histogram to 8 bins
                    data = data.reshape(8, -1).sum(axis=1).astype(item.dtype)
                dst.create_dataset(k, data=data, dtype=item.dtype, track_times=False)
                for a in item.attrs:
                    dst[k].attrs.create(a, item.attrs[a], dtype=item.attrs.get_id(a).dtype)
        if src.name == "/calibration":
            dst.attrs["layer_count"] = np.int64(keep_layers)

    def shrunk(name, sections, keep_layers=2, plan=None):
        path = out("session", name)
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_obj_track_times(False)
        with h5py.File(full, "r") as src, h5py.File(h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)) as dst:
            for k in src.attrs:
                dst.attrs.create(k, src.attrs[k], dtype=src.attrs.get_id(k).dtype)
            for sec in sections:
                gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
                gcpl.set_obj_track_times(False)
                h5py.h5g.create(dst.id, sec.encode(), gcpl=gcpl)
                copy(src[sec], dst[sec], keep_layers)
            if plan is not None:
                gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
                gcpl.set_obj_track_times(False)
                h5py.h5g.create(dst.id, b"plans", gcpl=gcpl)
                dst["plans"].create_dataset("mine", data=np.bytes_(plan), track_times=False)

    for corpus in ("bad", "bad2"):  # the refused sessions of both hostile corpora
        d = os.path.join(ROOT, "tests", "data", corpus)
        for name in sorted(os.listdir(d)):
            if name.startswith("session_") and name.endswith(".qsession"):
                shutil.copy(os.path.join(d, name), out("session", f"{corpus}_{name}"))
    plan = json.dumps({"schema": "quantscope-plan", "version": 2,
                       "defaults": {"weight": "int8-sym", "group_size": "channel"}, "entries": []})
    shrunk("calibration.qsession", ["calibration"])
    shrunk("sensitivity_runs_plans.qsession", ["sensitivity", "runs"], plan=plan)
    # Sessions written since session 10 store each row's canonical name (/sensitivity/layers/name);
    # the two seeds above predate it (tests open them as files from before).
    shrunk("named_sensitivity.qsession", ["sensitivity"])
    # The speed table needs a GPU to measure: the same layout written here (docs/analysis.md).
    path = out("session", "speed.qsession")
    with h5py.File(full, "r") as src, h5py.File(path, "w", track_order=False) as dst:
        for k in src.attrs:
            dst.attrs.create(k, src.attrs[k], dtype=src.attrs.get_id(k).dtype)
        g = dst.create_group("speed")
        g.attrs.create("device", np.bytes_("cpu"))
        copy(src["sensitivity/layers"], g.create_group("layers"), 0)
        formats = src["sensitivity/formats"]
        g.create_dataset("formats", data=formats[()], dtype=formats.dtype, track_times=False)
        n = src["sensitivity/layers/block"].shape[0] * formats.shape[0]
        g.create_dataset("token_counts", data=np.array([1, 16], np.int64), track_times=False)
        g.create_dataset("kernel_us", data=np.linspace(1, 2, n * 2).reshape(n, 2), track_times=False)
        g.create_dataset("baseline_us", data=np.linspace(2, 3, n * 2).reshape(n, 2), track_times=False)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        gguf_seeds(os.path.join(tmp, "g"))
        safetensors_seeds(os.path.join(tmp, "s"))
        llama2c_seeds()
        tokenizer_seeds(tmp)
        plan_seeds()
        session_seeds(tmp, sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "bin", "quantscope-cli"))

#!/usr/bin/env python3
"""Writes the bad-input corpus of tests/data/bad/ (docs/reliability.md).

usage: scripts/make_bad_corpus.py [OUT_DIR]        (default: tests/data/bad next to this script)
       scripts/make_bad_corpus.py --table         (the table of docs/reliability.md, from the manifest)

Every case is a small file (or folder) that a reader, the plan loader or the session loader must
refuse with a one-line BadInput error naming the file and the field, plus a few files that are
valid but hold NaN/Inf weights. The valid bases are tiny synthetic models (numpy, the `gguf`
package, safetensors' own writer, h5py) and the head of the bundled stories260K. Deterministic:
fixed seeds, no timestamps, so re-running it reproduces the committed bytes exactly.

manifest.json lists the cases: the quantscope-cli arguments ({bad} is this folder, {datasets}
the datasets folder), the exit code, and substrings the single stderr line must contain (the
file's name and the field). tests/reliability/run_bad_corpus.py runs them."""
import json
import os
import shutil
import struct
import sys

import h5py
import numpy as np
import gguf
from safetensors.numpy import save as st_save

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STORIES = os.path.join(ROOT, "datasets", "models", "stories260K", "stories260K.bin")

cases = []


def case(name, args, expect, exit_code=2, note=""):
    """One manifest entry. `expect`: substrings of the single stderr line (file name, field, …)."""
    files = [a for a in args if a.startswith("{bad}/")]
    # The file under test: the one the expected error names, else the first corpus file.
    named = [a for a in files if any(os.path.basename(a) == e for e in expect)]
    target = (named or files)[0][len("{bad}/"):]
    cases.append({"case": name, "file": target, "args": args, "exit": exit_code, "expect": expect,
                  "note": note})


def write(out, name, data):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


# ---- llama2.c --------------------------------------------------------------------------------
# Legacy header: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len);
# a positive vocab_size means the classifier shares the embedding. Then the tensors, in order.
L2C = dict(dim=16, hidden=32, layers=1, heads=2, kv=2, vocab=512, seq=32)


def l2c_sections(rng, c=L2C):
    d, hd, L, V, S = c["dim"], c["hidden"], c["layers"], c["vocab"], c["seq"]
    head = d // c["heads"]
    kv = head * c["kv"]
    w = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32)
    return [
        ("tok_embeddings.weight", w(V, d)),
        ("attention_norm.weight", np.ones((L, d), np.float32)),
        ("attention.wq.weight", w(L, d, d)),
        ("attention.wk.weight", w(L, kv, d)),
        ("attention.wv.weight", w(L, kv, d)),
        ("attention.wo.weight", w(L, d, d)),
        ("ffn_norm.weight", np.ones((L, d), np.float32)),
        ("feed_forward.w1.weight", w(L, hd, d)),
        ("feed_forward.w2.weight", w(L, d, hd)),
        ("feed_forward.w3.weight", w(L, hd, d)),
        ("norm.weight", np.ones(d, np.float32)),
        ("freqs_cos", np.ones((S, head // 2), np.float32)),
        ("freqs_sin", np.zeros((S, head // 2), np.float32)),
    ]


def l2c_header(c=L2C, **over):
    v = dict(c, **over)
    return struct.pack("<7i", v["dim"], v["hidden"], v["layers"], v["heads"], v["kv"], v["vocab"], v["seq"])


def l2c_v1_header(c=L2C, version=1, shared=1, **over):
    """Version-1 header: magic "ak42", version, the 7 ints, the shared-classifier byte, zero padding to 256."""
    v = dict(c, **over)
    h = struct.pack("<Ii7iB", 0x616B3432, version, v["dim"], v["hidden"], v["layers"], v["heads"], v["kv"],
                    v["vocab"], v["seq"], shared)
    return h + b"\0" * (256 - len(h))


def make_llama2c(out):
    rng = np.random.default_rng(14)
    secs = l2c_sections(rng)
    header = l2c_header()
    body = b"".join(a.tobytes() for _, a in secs)
    write(out, "l2c_tiny.bin", header + body)  # the valid base (inspect exit 0)
    case("l2c_valid_base", ["inspect", "{bad}/l2c_tiny.bin"], [], exit_code=0,
         note="the valid tiny model the other llama2.c cases corrupt")

    case("l2c_empty", ["inspect", "{bad}/l2c_empty.bin"], ["l2c_empty.bin"])
    write(out, "l2c_empty.bin", b"")
    write(out, "l2c_trunc_header.bin", header[:10])
    case("l2c_trunc_header", ["inspect", "{bad}/l2c_trunc_header.bin"], ["l2c_trunc_header.bin", "header"])
    # Truncated at every tensor boundary (and in the middle of the last one).
    cursor = len(header)
    for i, (name, arr) in enumerate(secs):
        if i > 0:
            short = name.split(".")[0] if "." in name else name
            fname = "l2c_trunc_before_%02d_%s.bin" % (i, name.replace(".weight", "").replace(".", "_"))
            write(out, fname, (header + body)[:cursor])
            case("l2c_trunc_before_%02d" % i, ["inspect", "{bad}/" + fname], [fname, "truncated"],
                 note="cut where %s begins" % name)
        cursor += arr.nbytes
    fname = "l2c_trunc_mid_last.bin"
    write(out, fname, (header + body)[:len(header) + len(body) - 6])
    case("l2c_trunc_mid_last", ["inspect", "{bad}/" + fname], [fname, "truncated"])
    # Absurd header values. A legacy header has no magic: a garbage one is simply not a model
    # file (the error names the header). The version-1 header ("ak42") is recognised by its
    # magic, so each bad value is refused naming its field.
    write(out, "l2c_legacy_garbage_header.bin", l2c_header(dim=1 << 30) + body[:64])
    case("l2c_legacy_garbage_header", ["inspect", "{bad}/l2c_legacy_garbage_header.bin"],
         ["l2c_legacy_garbage_header.bin", "header"])
    v1_body = b"".join(a.tobytes() for n, a in secs if not n.startswith("freqs"))
    write(out, "l2c_v1_trunc_header.bin", l2c_v1_header()[:20])
    case("l2c_v1_trunc_header", ["inspect", "{bad}/l2c_v1_trunc_header.bin"], ["l2c_v1_trunc_header.bin", "header."])
    write(out, "l2c_v1_version_7.bin", l2c_v1_header(version=7) + v1_body[:64])
    case("l2c_v1_version_7", ["inspect", "{bad}/l2c_v1_version_7.bin"], ["l2c_v1_version_7.bin", "header.version"])
    for field, val in [("dim", 1 << 30), ("n_layers", 100000), ("vocab_size", -(1 << 30)),
                       ("n_heads", 0), ("seq_len", -5), ("n_kv_heads", 3), ("hidden_dim", -1)]:
        key = {"dim": "dim", "n_layers": "layers", "vocab_size": "vocab", "n_heads": "heads",
               "seq_len": "seq", "n_kv_heads": "kv", "hidden_dim": "hidden"}[field]
        fname = "l2c_v1_bad_%s.bin" % field
        write(out, fname, l2c_v1_header(**{key: val}) + v1_body[:64])  # refused on the header alone
        case("l2c_v1_bad_" + field, ["inspect", "{bad}/" + fname], [fname, "header." + field])
    # Trailing garbage: the file is longer than the header says.
    write(out, "l2c_trailing_bytes.bin", header + body + b"\x00" * 12)
    case("l2c_trailing_bytes", ["inspect", "{bad}/l2c_trailing_bytes.bin"], ["l2c_trailing_bytes.bin"])
    # The head of the real stories260K: header intact, cut inside the embedding table.
    with open(STORIES, "rb") as f:
        head = f.read(28 + 4096)
    write(out, "stories260K_head.bin", head)
    case("stories260K_trunc_embedding", ["inspect", "{bad}/stories260K_head.bin"],
         ["stories260K_head.bin", "truncated"], note="bundled model cut after 4 KiB")

    # NaN / Inf weights: valid files. inspect reports them (exit 0); computing refuses, naming the tensor.
    for kind, val in [("nan", np.nan), ("inf", np.inf)]:
        secs2 = [(n, a.copy()) for n, a in secs]
        secs2[2][1][0, 3, 5] = val  # attention.wq of layer 0
        fname = "l2c_%s_weights.bin" % kind
        write(out, fname, header + b"".join(a.tobytes() for _, a in secs2))
        case("l2c_%s_inspect" % kind,
             ["inspect", "{bad}/" + fname, "--tensor", "layers.0.attention.wq.weight", "--stats"],
             [], exit_code=0, note="inspect reports the %s count (stdout), exit 0" % kind)
        case("l2c_%s_perplexity" % kind,
             ["--backend", "cpu", "perplexity", "{bad}/" + fname, "--tokenizer",
              "{datasets}/models/stories260K/tok512.bin", "--text",
              "{datasets}/text/tinystories_validation_head.txt", "--tokens", "16"],
             [fname, "layers.0.attention.wq.weight", "NaN" if kind == "nan" else "infinite"],
             note="the runtime refuses non-finite weights, naming the tensor")
    tokargs = ["--tokenizer", "{datasets}/models/stories260K/tok512.bin", "--text",
               "{datasets}/text/tinystories_validation_head.txt", "--tokens", "16"]
    case("l2c_nan_plan_measure", ["plan", "measure", "{bad}/l2c_nan_weights.bin", "--sweep", "int4-g32-sym"] + tokargs,
         ["l2c_nan_weights.bin", "layers.0.attention.wq.weight", "NaN"],
         note="the quantization sweep refuses too (before any format is tried)")
    case("l2c_inf_calibrate", ["--backend", "cpu", "calibrate", "{bad}/l2c_inf_weights.bin"] + tokargs,
         ["l2c_inf_weights.bin", "layers.0.attention.wq.weight", "infinite"])


# ---- GGUF ------------------------------------------------------------------------------------
def gguf_bytes(path_tmp, tensors, arch="llama", cfg=None, extra=None):
    w = gguf.GGUFWriter(path_tmp, arch)
    c = dict(ctx=32, d=16, L=1, ff=32, H=2, KV=2)
    c.update(cfg or {})
    w.add_context_length(c["ctx"])
    w.add_embedding_length(c["d"])
    w.add_block_count(c["L"])
    w.add_feed_forward_length(c["ff"])
    w.add_head_count(c["H"])
    w.add_head_count_kv(c["KV"])
    w.add_layer_norm_rms_eps(1e-5)
    if extra:
        extra(w)
    for name, arr in tensors:
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(path_tmp, "rb") as f:
        data = f.read()
    os.remove(path_tmp)
    return data


def gguf_tensors(rng, d=16, ff=32, V=32):
    w = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32)
    p = "blk.0."
    return [
        ("token_embd.weight", w(V, d)),
        (p + "attn_norm.weight", np.ones(d, np.float32)),
        (p + "attn_q.weight", w(d, d)),
        (p + "attn_k.weight", w(d, d)),
        (p + "attn_v.weight", w(d, d).astype(np.float16)),
        (p + "attn_output.weight", w(d, d)),
        (p + "ffn_norm.weight", np.ones(d, np.float32)),
        (p + "ffn_gate.weight", w(ff, d)),
        (p + "ffn_up.weight", w(ff, d)),
        (p + "ffn_down.weight", w(d, ff)),
        ("output_norm.weight", np.ones(d, np.float32)),
        ("output.weight", w(V, d)),
    ]


class GgufLayout:
    """Offsets of the sections of a GGUF v3 file (parsed here, independently of the C++ reader)."""

    def __init__(self, data):
        self.data = data
        pos = 4 + 4
        n_t, n_kv = struct.unpack_from("<QQ", data, pos)
        pos += 16
        self.header_end = pos
        self.kv_starts = []
        for _ in range(n_kv):
            self.kv_starts.append(pos)
            klen = struct.unpack_from("<Q", data, pos)[0]
            pos += 8 + klen
            t = struct.unpack_from("<I", data, pos)[0]
            pos += 4
            pos = self._skip_value(t, pos)
        self.kv_end = pos
        self.tensor_starts = []
        self.tensors = []
        for _ in range(n_t):
            self.tensor_starts.append(pos)
            nlen = struct.unpack_from("<Q", data, pos)[0]
            name = data[pos + 8:pos + 8 + nlen].decode()
            pos += 8 + nlen
            nd = struct.unpack_from("<I", data, pos)[0]
            pos += 4 + 8 * nd
            typ = struct.unpack_from("<I", data, pos)[0]
            off_pos = pos + 4
            off = struct.unpack_from("<Q", data, off_pos)[0]
            pos += 12
            self.tensors.append(dict(name=name, type_pos=off_pos - 4, off_pos=off_pos, offset=off))
        self.infos_end = pos
        self.data_start = (pos + 31) // 32 * 32

    def _skip_value(self, t, pos):
        fixed = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
        if t in fixed:
            return pos + fixed[t]
        if t == 8:
            return pos + 8 + struct.unpack_from("<Q", self.data, pos)[0]
        if t == 9:
            et, n = struct.unpack_from("<IQ", self.data, pos)
            pos += 12
            for _ in range(n):
                pos = self._skip_value(et, pos)
            return pos
        raise ValueError(t)


def patch(data, pos, fmt, value):
    b = bytearray(data)
    struct.pack_into(fmt, b, pos, value)
    return bytes(b)


def make_gguf(out):
    rng = np.random.default_rng(15)
    tmp = os.path.join(out, ".tmp.gguf")
    tensors = gguf_tensors(rng)
    base = gguf_bytes(tmp, tensors)
    lay = GgufLayout(base)
    write(out, "gguf_tiny.gguf", base)
    case("gguf_valid_base", ["inspect", "{bad}/gguf_tiny.gguf"], [], exit_code=0)

    def bad(name, data, expect, args_extra=(), note="", exit_code=2):
        fname = name + ".gguf"
        write(out, fname, data)
        case(name, ["inspect", "{bad}/" + fname] + list(args_extra), [fname] + expect, exit_code, note)

    bad("gguf_wrong_magic", b"GGUX" + base[4:], ["header", "not a recognised model file"],
        note="no magic matches: not a model file")
    bad("gguf_version_1", patch(base, 4, "<I", 1), ["header.version"])
    bad("gguf_version_99", patch(base, 4, "<I", 99), ["header.version"])
    # Truncated at every section boundary (and inside each section).
    cuts = [("magic", 2), ("version", 4), ("n_tensors", 8), ("n_kv", 16), ("kv", lay.header_end),
            ("kv_mid", lay.kv_starts[1] + 5), ("tensor_infos", lay.kv_end),
            ("tensor_info_mid", lay.tensor_starts[3] + 7), ("padding", lay.infos_end),
            ("data", lay.data_start), ("data_mid", lay.data_start + lay.tensors[5]["offset"] + 3),
            ("last_tensor", len(base) - 10)]
    field_of = {"magic": "", "version": "header.version", "n_tensors": "header.n_tensors",
                # Cut inside the metadata: the key-value count is refused against the bytes left
                # before any entry is read.
                "n_kv": "header.n_kv", "kv": "header.n_kv", "kv_mid": "header.n_kv",
                "tensor_infos": "tensor_info[0]", "tensor_info_mid": "tensor_info[3].name",
                "padding": "", "data": "", "data_mid": "", "last_tensor": "output.weight"}
    for label, at in cuts:
        f = field_of[label]
        bad("gguf_trunc_" + label, base[:at], [f] if f else [], note="cut at byte %d" % at)
    # Huge counts and lengths: refused before anything is allocated.
    bad("gguf_huge_n_kv", patch(base, 16, "<Q", 1 << 62), ["header.n_kv"])
    bad("gguf_huge_n_tensors", patch(base, 8, "<Q", 1 << 60), ["header.n_tensors"])
    bad("gguf_huge_key_length", patch(base, lay.kv_starts[0], "<Q", (1 << 63) + 5), ["metadata[0].key"])
    bad("gguf_huge_name_length", patch(base, lay.tensor_starts[0], "<Q", 1 << 40), ["tensor_info[0].name"])
    # An array claiming 2^50 elements (a tokenizer list): built by a writer with one array KV.
    arr_base = gguf_bytes(tmp, tensors, extra=lambda w: w.add_array("test.big_array", [1, 2, 3]))
    al = GgufLayout(arr_base)
    arr_kv = al.kv_starts[-1]
    klen = struct.unpack_from("<Q", arr_base, arr_kv)[0]
    count_pos = arr_kv + 8 + klen + 4 + 4  # key, value type (array), element type, then the count
    bad("gguf_huge_array_length", patch(arr_base, count_pos, "<Q", 1 << 50), ["test.big_array", "array"])
    bad("gguf_huge_dims", patch(base, lay.tensor_starts[0] + 8 + len("token_embd.weight"), "<I", 1000),
        ["token_embd.weight", "n_dims"])
    # Offsets past the end and overlapping tensors.
    last = lay.tensors[-1]
    bad("gguf_offset_past_end", patch(base, last["off_pos"], "<Q", last["offset"] + (1 << 20)),
        ["output.weight", "past the end"])
    bad("gguf_offset_huge", patch(base, last["off_pos"], "<Q", (1 << 64) - 32),
        ["output.weight", "past the end"])
    t5 = lay.tensors[5]
    bad("gguf_overlap", patch(base, t5["off_pos"], "<Q", lay.tensors[4]["offset"]), ["overlaps"])
    bad("gguf_misaligned_offset", patch(base, t5["off_pos"], "<Q", t5["offset"] + 4),
        [t5["name"], "alignment"])
    # An unsupported tensor type: listed, but its data cannot be decoded.
    q = lay.tensors[2]
    bad("gguf_unsupported_dtype", patch(base, q["type_pos"], "<I", 77), ["blk.0.attn_q.weight", "77"],
        args_extra=["--tensor", "blk.0.attn_q.weight", "--stats"])
    # Shapes that contradict the config (embedding_length 24, tensors are 16 wide).
    bad("gguf_shape_vs_config", gguf_bytes(tmp, tensors, cfg=dict(d=24)), ["token_embd.weight", "contradicts the config"],
        note="llama.embedding_length says 24, the weights are 16 wide")
    # NaN weights in an F32 tensor: inspect --stats reports them.
    tn = [(n, a.copy()) for n, a in tensors]
    tn[2][1][1, 2] = np.nan
    tn[2][1][3, 4] = np.inf
    fname = "gguf_nan_weights.gguf"
    write(out, fname, gguf_bytes(tmp, tn))
    case("gguf_nan_inspect", ["inspect", "{bad}/" + fname, "--tensor", "blk.0.attn_q.weight", "--stats"],
         [], exit_code=0, note="inspect reports 1 NaN and 1 Inf")


# ---- safetensors -----------------------------------------------------------------------------
def st_raw(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def make_safetensors(out):
    rng = np.random.default_rng(16)
    ts = dict((n, a) for n, a in gguf_tensors(rng, V=32))
    hf = {}
    for n, a in ts.items():  # HF Llama names
        hf[n.replace("token_embd", "model.embed_tokens").replace("blk.0.", "model.layers.0.")
           .replace("attn_norm", "input_layernorm").replace("attn_q", "self_attn.q_proj")
           .replace("attn_k", "self_attn.k_proj").replace("attn_v", "self_attn.v_proj")
           .replace("attn_output", "self_attn.o_proj").replace("ffn_norm", "post_attention_layernorm")
           .replace("ffn_gate", "mlp.gate_proj").replace("ffn_up", "mlp.up_proj")
           .replace("ffn_down", "mlp.down_proj").replace("output_norm", "model.norm")
           .replace("output.weight", "lm_head.weight")] = a
    base = st_save(hf, metadata={"format": "pt"})
    write(out, "st_tiny.safetensors", base)
    case("st_valid_base", ["inspect", "{bad}/st_tiny.safetensors"], [], exit_code=0)
    hlen = struct.unpack_from("<Q", base)[0]
    header = json.loads(base[8:8 + hlen])
    data = base[8 + hlen:]

    def bad(name, blob, expect, args_extra=(), note="", exit_code=2):
        fname = name + ".safetensors"
        write(out, fname, blob)
        case(name, ["inspect", "{bad}/" + fname] + list(args_extra), [fname] + expect, exit_code, note)

    bad("st_trunc_length", base[:5], [], note="not even the 8-byte header length")
    bad("st_trunc_header", base[:8 + hlen // 2], ["header"])
    bad("st_trunc_data", base[:8 + hlen + len(data) // 2], [])
    bad("st_huge_header_length", struct.pack("<Q", 1 << 62) + base[8:], ["header"],
        note="a header length past the end: not recognised as safetensors at all")
    bad("st_invalid_json", struct.pack("<Q", hlen) + b"{\"a\":" + base[13:], ["header"])
    bad("st_header_not_object", st_raw([1, 2, 3], data), ["header"])

    def mutate(fn):
        h = json.loads(json.dumps(header))
        fn(h)
        return h

    q = "model.layers.0.self_attn.q_proj.weight"
    bad("st_offsets_past_end",
        st_raw(mutate(lambda h: h[q].__setitem__("data_offsets", [len(data) - 8, len(data) + 1016])), data),
        [q])
    bad("st_offsets_huge",
        st_raw(mutate(lambda h: h[q].__setitem__("data_offsets", [2 ** 63, 2 ** 63 + 1024])), data), [q])
    k = "model.layers.0.self_attn.k_proj.weight"
    bad("st_overlap", st_raw(mutate(lambda h: h[k].__setitem__("data_offsets", h[q]["data_offsets"])), data),
        ["overlap"])
    bad("st_unsupported_dtype", st_raw(mutate(lambda h: h[q].__setitem__("dtype", "F4_E2M1")), data),
        [q, "F4_E2M1"], args_extra=["--tensor", q, "--stats"], note="listed by inspect; refused when decoded")
    bad("st_shape_vs_bytes", st_raw(mutate(lambda h: h[q].__setitem__("shape", [16, 17])), data), [q])
    bad("st_huge_shape", st_raw(mutate(lambda h: h[q].__setitem__("shape", [2 ** 40, 2 ** 40])), data), [q])
    bad("st_negative_shape", st_raw(mutate(lambda h: h[q].__setitem__("shape", [-16, -16])), data), [q])

    # A checkpoint folder whose config.json contradicts the tensor shapes.
    folder = os.path.join(out, "st_config_contradicts")
    os.makedirs(folder, exist_ok=True)
    write(folder, "model.safetensors", base)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 24,
           "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
           "num_key_value_heads": 2, "vocab_size": 32, "max_position_embeddings": 32,
           "rms_norm_eps": 1e-5}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    case("st_config_contradicts", ["inspect", "{bad}/st_config_contradicts"], ["shape"],
         note="config.json hidden_size 24, weights 16 wide")
    # A config.json that is not JSON.
    folder2 = os.path.join(out, "st_config_invalid")
    os.makedirs(folder2, exist_ok=True)
    write(folder2, "model.safetensors", base)
    write(folder2, "config.json", b"{\"hidden_size\": 16,")
    case("st_config_invalid", ["inspect", "{bad}/st_config_invalid"], ["config.json"])


# ---- plans -----------------------------------------------------------------------------------
def make_plans(out):
    write(out, "plan_empty.json", b"")
    case("plan_empty", ["plan", "show", "{bad}/plan_empty.json"], ["plan_empty.json", "plan"])
    write(out, "plan_invalid.json", b"{\"quantscope_plan\": 2, \"entries\": [")
    case("plan_invalid_json", ["plan", "show", "{bad}/plan_invalid.json"], ["plan_invalid.json", "plan: invalid JSON"])
    write(out, "plan_not_object.json", b"[1, 2, 3]\n")
    case("plan_not_object", ["plan", "show", "{bad}/plan_not_object.json"], ["plan_not_object.json", "plan"])
    write(out, "plan_bad_version.json", b"{\"quantscope_plan\": 99}\n")
    case("plan_bad_version", ["plan", "show", "{bad}/plan_bad_version.json"],
         ["plan_bad_version.json", "quantscope_plan"])
    write(out, "plan_v2_version_99.json", b'{"schema": "quantscope-plan", "version": 99}\n')
    case("plan_v2_version_99", ["plan", "show", "{bad}/plan_v2_version_99.json"],
         ["plan_v2_version_99.json", "version"])
    # A schema-2 plan made for stories260K (its real sampled hash).
    plan = {"schema": "quantscope-plan", "version": 2, "name": "w4 everywhere",
            "model": {"name": "stories260K", "hash": "xxh3-64-sampled:53aa64a0f6a8f5c8", "architecture": "llama",
                      "linear_layers": 35, "parameters": 226560},
            "defaults": {"weight": "int4-sym", "group_size": 32},
            "entries": [{"layers": ["blocks.0.attn.q"], "weight": "int8-sym"}]}
    write(out, "plan_bad_format.json",
          json.dumps(dict(plan, defaults={"weight": "int3"}), indent=2).encode())
    case("plan_bad_format", ["plan", "show", "{bad}/plan_bad_format.json"],
         ["plan_bad_format.json", "defaults.weight"])
    write(out, "plan_unknown_key.json", json.dumps(dict(plan, colour="blue"), indent=2).encode())
    case("plan_unknown_key", ["plan", "show", "{bad}/plan_unknown_key.json"], ["plan_unknown_key.json", "colour"])
    write(out, "plan_other_model.json", json.dumps(plan, indent=2).encode())
    case("plan_other_model", ["plan", "show", "{bad}/plan_other_model.json", "--model", "{bad}/l2c_tiny.bin"],
         ["plan_other_model.json", "hash"], note="a plan made for stories260K, used on another model")


# ---- sessions --------------------------------------------------------------------------------
def make_sessions(out):
    def h5(name, fill):
        path = os.path.join(out, name)
        if os.path.exists(path):
            os.remove(path)
        # No object-header times (the bytes must not depend on the clock): the root group via
        # the file-creation list, other groups and datasets through group()/dataset() below.
        fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
        fcpl.set_obj_track_times(False)
        with h5py.File(h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)) as f:
            fill(f)
        return path

    def group(parent, name):
        gcpl = h5py.h5p.create(h5py.h5p.GROUP_CREATE)
        gcpl.set_obj_track_times(False)
        h5py.h5g.create(parent.id, name.encode(), gcpl=gcpl)
        return parent[name]

    def root(f, model_hash="xxh3-64-sampled:53aa64a0f6a8f5c8", fmt="quantscope-session", version=1):
        # Fixed-length strings, as the session writer stores them.
        f.attrs["format"] = np.bytes_(fmt)
        f.attrs["schema_version"] = np.int64(version)
        f.attrs["model_path"] = np.bytes_("stories260K.bin")
        f.attrs["model_hash"] = np.bytes_(model_hash)

    cmd = lambda s: ["--backend", "cpu", "calibrate", "{bad}/l2c_tiny.bin", "--tokenizer",
                     "{datasets}/models/stories260K/tok512.bin", "--tokens", "16", "--session", "{bad}/" + s]
    write(out, "session_text.qsession", b"this is not an HDF5 file\n")
    case("session_not_hdf5", cmd("session_text.qsession"), ["session_text.qsession", "HDF5 signature"])
    write(out, "session_empty.qsession", b"")
    case("session_empty", cmd("session_empty.qsession"), ["session_empty.qsession", "HDF5 signature"])
    p = h5("session_trunc_src.qsession", lambda f: (root(f), group(f, "plans").create_dataset(
        "p", data=np.bytes_("{}"), track_times=False)))
    with open(p, "rb") as f:
        blob = f.read()
    os.remove(p)
    write(out, "session_truncated.qsession", blob[:len(blob) // 2])
    case("session_truncated", cmd("session_truncated.qsession"), ["session_truncated.qsession", "HDF5"])
    h5("session_wrong_tag.qsession", lambda f: root(f, fmt="something-else"))
    case("session_wrong_tag", cmd("session_wrong_tag.qsession"), ["session_wrong_tag.qsession", "format"])
    h5("session_version_99.qsession", lambda f: root(f, version=99))
    case("session_version_99", cmd("session_version_99.qsession"),
         ["session_version_99.qsession", "schema_version"])
    h5("session_other_model.qsession", lambda f: root(f))
    case("session_other_model", cmd("session_other_model.qsession"),
         ["session_other_model.qsession", "model_hash"])

    def bad_calib(f):
        root(f)
        g = group(f, "calibration")
        for k, v in [("tokens", 16), ("windows", 1), ("context", 16)]:
            g.attrs[k] = np.int64(v)
        g.attrs["text_source"] = np.bytes_("text.txt")
        g.attrs["protocol"] = np.bytes_("windows")
        g.attrs["layer_count"] = np.int64(1 << 40)  # a claim the file cannot hold
        group(g, "layers")
    h5("session_bad_layer_count.qsession", bad_calib)
    case("session_bad_layer_count", cmd("session_bad_layer_count.qsession"),
         ["session_bad_layer_count.qsession", "/calibration", "layer_count"])

    def layers_mismatch(f):
        root(f)
        g = group(f, "calibration")
        for k, v in [("tokens", 16), ("windows", 1), ("context", 16), ("layer_count", 3)]:
            g.attrs[k] = np.int64(v)
        g.attrs["text_source"] = np.bytes_("text.txt")
        g.attrs["protocol"] = np.bytes_("windows")
        group(g, "layers")
    h5("session_layers_missing.qsession", layers_mismatch)
    case("session_layers_missing", cmd("session_layers_missing.qsession"),
         ["session_layers_missing.qsession", "/calibration/layers"], note="layer_count 3, no layer groups")


def table():
    """Markdown for docs/reliability.md: every case of the manifest."""
    with open(os.path.join(ROOT, "tests", "data", "bad", "manifest.json")) as f:
        m = json.load(f)
    print("%d cases, %d of them valid (exit 0):\n" % (len(m["cases"]), sum(c["exit"] == 0 for c in m["cases"])))
    print("| case | command | exit | the error line contains | note |\n|---|---|---|---|---|")
    for c in m["cases"]:
        cmd = " ".join(a.replace("{bad}/", "").replace("{datasets}/", "") for a in c["args"])
        if len(cmd) > 70:
            cmd = cmd[:69] + "…"
        print("| %s | `%s` | %d | %s | %s |" % (c["case"], cmd.replace("|", "\\|"), c["exit"],
                                               ", ".join("`%s`" % e for e in c["expect"]) or "—", c["note"]))


def main():
    if sys.argv[1:] == ["--table"]:
        return table()
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "bad")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):  # start clean: stale cases would otherwise linger
        p = os.path.join(out, name)
        if name in ("README.md",):
            continue
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    make_llama2c(out)
    make_gguf(out)
    make_safetensors(out)
    make_plans(out)
    make_sessions(out)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"generated_by": "scripts/make_bad_corpus.py", "cases": cases}, f, indent=1)
        f.write("\n")
    print("%d cases in %s" % (len(cases), out))


if __name__ == "__main__":
    main()

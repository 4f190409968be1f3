#!/usr/bin/env python3
"""Writes the second hostile corpus, tests/data/bad2/ (issue 28; docs/reliability.md).

usage: scripts/make_hostile_corpus2.py [OUT_DIR]     (default: tests/data/bad2 next to this script)
       scripts/make_hostile_corpus2.py --table      (the tables of docs/reliability.md, from the manifest)

The cases of issue 28 re-created from their descriptions, plus our own: crashes (key/value heads
that do not divide the heads, added_tokens ids past the vocabulary, invalid UTF-8 in GGUF
metadata), hangs (FIFOs where a file is expected, HDF5 external links / external storage /
virtual datasets, a catastrophically backtracking tokenizer regex), memory bombs (nested GGUF
arrays, a 140k-entry safetensors header, plans with too many entries or selectors, a session
sensitivity table claiming 5000 x 5000, /dev/zero and a 2 GB sparse text), files that were
accepted but must not be (an overlap hidden behind an empty tensor, duplicate safetensors keys,
non-string __metadata__, a tokenizer.json of another vocabulary beside the model, BPE merges
naming non-tokens, I32 "weights") and unclear messages (a context_length of 1, a text without
tokens, a directory given as a text or a plan, a plan version of 2^64-1).

What a repository cannot hold is made when a case runs, by the harness's "setup" steps: FIFOs,
folders, sparse files, and the files of several megabytes that the memory bombs need, kept here
gzip-compressed (a few KB each). Every case runs under the manifest's "limits": 500 MB of address
space and 10 s (tests/reliability/run_bad_corpus.py). Deterministic: fixed seeds, gzip without
time stamps, HDF5 object times off."""
import gzip
import io
import json
import os
import shutil
import struct
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bad_corpus as base  # noqa: E402  (its tiny models and GGUF helpers)
from gpt2_bytes import bytes_to_unicode  # noqa: E402

ROOT = base.ROOT
cases = []
TOK512 = "{datasets}/models/stories260K/tok512.bin"
TEXT = "{datasets}/text/tinystories_validation_head.txt"


def case(name, cls, args, expect, exit_code=2, note="", setup=None, unchanged=None):
    c = {"case": name, "class": cls, "args": args, "exit": exit_code, "expect": expect, "note": note}
    if setup:
        c["setup"] = setup
    if unchanged:
        c["unchanged"] = unchanged
    cases.append(c)


def write(out, name, data):
    path = os.path.join(out, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def write_gz(out, name, data):
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as g:
        g.write(data)
    write(out, name + ".gz", buf.getvalue())


def l2c_model(c=None, seed=14):
    c = dict(base.L2C, **(c or {}))
    secs = base.l2c_sections(np.random.default_rng(seed), c)
    return base.l2c_header(c) + b"".join(a.tobytes() for _, a in secs)


def gguf_str(s):
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf_insert_kv(data, kv):
    """`data` (GGUF v3) with one more key-value pair `kv` (encoded) after the others; the tensor
    data section keeps its alignment (32)."""
    lay = base.GgufLayout(data)
    n_kv = struct.unpack_from("<Q", data, 16)[0]
    head = base.patch(data, 16, "<Q", n_kv + 1)
    infos = head[lay.kv_end:lay.infos_end]
    end = lay.kv_end + len(kv) + len(infos)
    pad = (-end) % 32
    return head[:lay.kv_end] + kv + infos + b"\0" * pad + head[lay.data_start:]


# ---- byte-level BPE tokenizer.json files (HF layout, what loadHfTokenizerJson reads) -------------
def tokenizer_json(n_tokens, merges=(), pre=None, added=()):
    """A BPE tokenizer of exactly `n_tokens` tokens: the 256 byte characters, then fillers."""
    table = bytes_to_unicode()
    order = list(range(33, 127)) + [b for b in range(256) if not 33 <= b < 127]  # printable first
    chars = [table[b] for b in order]
    vocab = {}
    for ch in chars[:n_tokens]:
        vocab[ch] = len(vocab)
    i = 0
    while len(vocab) < n_tokens:
        vocab["<f%d>" % i] = len(vocab)
        i += 1
    return json.dumps({
        "version": "1.0", "added_tokens": list(added),
        "pre_tokenizer": pre or {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "model": {"type": "BPE", "vocab": vocab, "merges": list(merges)},
    }).encode()


def hf_llama_folder(out, name, cfg_over=None, tensors_over=None, tokenizer=None):
    """A Llama checkpoint folder (config.json + model.safetensors) of the tiny shape."""
    from safetensors.numpy import save as st_save
    rng = np.random.default_rng(16)
    ts = dict(base.gguf_tensors(rng, V=32))
    ren = {"token_embd": "model.embed_tokens", "blk.0.": "model.layers.0.", "attn_norm": "input_layernorm",
           "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
           "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
           "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj", "output_norm": "model.norm",
           "output.weight": "lm_head.weight"}
    hf = {}
    for n, a in ts.items():
        for k, v in ren.items():
            n = n.replace(k, v)
        hf[n] = a.astype(np.float32)
    hf.update(tensors_over or {})
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 16,
           "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
           "num_key_value_heads": 2, "vocab_size": 32, "max_position_embeddings": 32, "rms_norm_eps": 1e-5}
    cfg.update(cfg_over or {})
    write(out, name + "/model.safetensors", st_save(hf))
    write(out, name + "/config.json", json.dumps(cfg, indent=1).encode())
    if tokenizer is not None:
        write(out, name + "/tokenizer.json", tokenizer)


def h5file(path, fill):
    if os.path.exists(path):
        os.remove(path)
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_obj_track_times(False)
    with h5py.File(h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)) as f:
        fill(f)


def sensitivity_attrs(g):
    for k, v in [("tokens", 8), ("context", 8)]:
        g.attrs[k] = np.int64(v)
    g.attrs["base_perplexity"] = np.float64(1.0)
    g.attrs["model_hash"] = np.bytes_("x")
    g.attrs["text_source"] = np.bytes_("t")


def session_root(f):
    f.attrs["format"] = np.bytes_("quantscope-session")
    f.attrs["schema_version"] = np.int64(1)
    f.attrs["model_path"] = np.bytes_("l2c_tiny.bin")
    # l2c_tiny.bin's sampled hash: the session belongs to the model the cases run, so that
    # everything but the hostile object is valid.
    f.attrs["model_hash"] = np.bytes_("xxh3-64-sampled:cb1c8fa7e926c4a1")


# ---- 1. crashes ---------------------------------------------------------------------------------
def make_crashes(out, tmp):
    rng = np.random.default_rng(28)
    w = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32)
    d, ff, V = 16, 32, 32

    def heads_gguf(H, KV):
        kvd = (d // H) * max(KV, 1)
        p = "blk.0."
        ts = [("token_embd.weight", w(V, d)), (p + "attn_norm.weight", np.ones(d, np.float32)),
              (p + "attn_q.weight", w(d, d)), (p + "attn_k.weight", w(kvd, d)), (p + "attn_v.weight", w(kvd, d)),
              (p + "attn_output.weight", w(d, d)), (p + "ffn_norm.weight", np.ones(d, np.float32)),
              (p + "ffn_gate.weight", w(ff, d)), (p + "ffn_up.weight", w(ff, d)), (p + "ffn_down.weight", w(d, ff)),
              ("output_norm.weight", np.ones(d, np.float32)), ("output.weight", w(V, d))]
        return base.gguf_bytes(tmp, ts, cfg=dict(H=H, KV=KV))

    write(out, "gguf_kv_3_of_4.gguf", heads_gguf(4, 3))
    case("gguf_kv_heads_not_dividing", "crash", ["inspect", "{bad}/gguf_kv_3_of_4.gguf"],
         ["gguf_kv_3_of_4.gguf", "llama.attention.head_count_kv", "does not divide"],
         note="3 key/value heads for 4 heads: the attention read past its cache rows")
    write(out, "gguf_kv_0.gguf", heads_gguf(2, 0))
    case("gguf_kv_heads_zero", "crash", ["--backend", "cpu", "perplexity", "{bad}/gguf_kv_0.gguf",
                                         "--tokenizer", "{bad}/tok32.json", "--text", TEXT, "--tokens", "8"],
         ["gguf_kv_0.gguf", "llama.attention.head_count_kv"], note="SIGFPE in the CPU attention before")
    write(out, "tok32.json", tokenizer_json(32))
    write(out, "text_punct.txt", b"!#$%&()*+,-./0123456789:;<=>?@" * 8 + b"\n")
    case("tok32_valid_base", "crash", ["--backend", "cpu", "perplexity", "{bad}/gguf_kv_ok.gguf",
                                       "--tokenizer", "{bad}/tok32.json", "--text", "{bad}/text_punct.txt", "--tokens", "8"],
         [], exit_code=0, note="the base of the head cases: 2 heads, 2 key/value heads, runs")
    write(out, "gguf_kv_ok.gguf", heads_gguf(2, 2))
    hf_llama_folder(out, "hf_kv_3_of_4", cfg_over={"num_attention_heads": 4, "num_key_value_heads": 3})
    case("hf_kv_heads_not_dividing", "crash", ["inspect", "{bad}/hf_kv_3_of_4"],
         ["hf_kv_3_of_4", "config.json", "num_key_value_heads"])
    c = dict(base.L2C, heads=4, kv=3)
    secs = base.l2c_sections(np.random.default_rng(3), c)
    write(out, "l2c_kv_3_of_4.bin", base.l2c_v1_header(c) + b"".join(a.tobytes() for n, a in secs
                                                                      if not n.startswith("freqs"))[:64])
    case("l2c_kv_heads_not_dividing", "crash", ["inspect", "{bad}/l2c_kv_3_of_4.bin"],
         ["l2c_kv_3_of_4.bin", "header.n_kv_heads"])
    # added_tokens id 10^8: written past the vocabulary before.
    write(out, "tok_added_huge_id.json",
          tokenizer_json(512, added=[{"id": 100000000, "content": "<x>", "special": True}]))
    case("tok_added_tokens_huge_id", "crash",
         ["--backend", "cpu", "perplexity", "{bad}/l2c_tiny.bin", "--tokenizer", "{bad}/tok_added_huge_id.json",
          "--text", TEXT, "--tokens", "8"], ["tok_added_huge_id.json", "added_tokens[0].id"],
         note="SIGSEGV before")
    write(out, "tok_added_negative_id.json",
          tokenizer_json(512, added=[{"id": -3, "content": "<x>", "special": True}]))
    case("tok_added_tokens_negative_id", "crash",
         ["--backend", "cpu", "perplexity", "{bad}/l2c_tiny.bin", "--tokenizer", "{bad}/tok_added_negative_id.json",
          "--text", TEXT, "--tokens", "8"], ["tok_added_negative_id.json", "added_tokens[0].id"])
    # Invalid UTF-8 in GGUF strings: a value, a key, a tensor name.
    g = base.gguf_bytes(tmp, base.gguf_tensors(np.random.default_rng(15)),
                        extra=lambda wr: (wr.add_name("NAMEPLACEHOLDER"), wr.add_string("test.key_QQQQ", "v")))
    write(out, "gguf_utf8_value.gguf", g.replace(b"NAMEPLACEHOLDER", b"NAME\xff\xfePLACEHOLD"))
    case("gguf_invalid_utf8_value", "crash", ["inspect", "{bad}/gguf_utf8_value.gguf", "--json"],
         ["gguf_utf8_value.gguf", "general.name", "UTF-8"], note="an uncaught nlohmann type_error before")
    write(out, "gguf_utf8_key.gguf", g.replace(b"test.key_QQQQ", b"test.key_\xc0\xaf\xed\xa0"))
    case("gguf_invalid_utf8_key", "crash", ["inspect", "{bad}/gguf_utf8_key.gguf", "--json"],
         ["gguf_utf8_key.gguf", ".key", "UTF-8"], note="overlong '/' and a surrogate")
    write(out, "gguf_utf8_tensor.gguf", g.replace(b"output_norm.weight", b"output_norm.\xf8eight"))
    case("gguf_invalid_utf8_tensor_name", "crash", ["inspect", "{bad}/gguf_utf8_tensor.gguf"],
         ["gguf_utf8_tensor.gguf", ".name", "UTF-8"])


# ---- 2. hangs -----------------------------------------------------------------------------------
def make_hangs(out):
    run = lambda model, *extra: ["--backend", "cpu", "perplexity", model, "--tokenizer", TOK512, "--text", TEXT,
                                 "--tokens", "8"] + list(extra)
    case("fifo_model", "hang", ["inspect", "{tmp}/model.gguf"], ["model.gguf", "FIFO"],
         setup=[{"fifo": "model.gguf"}])
    case("fifo_text", "hang", ["--backend", "cpu", "perplexity", "{bad}/l2c_tiny.bin", "--tokenizer", TOK512,
                               "--text", "{tmp}/text.txt"], ["text.txt", "FIFO"], setup=[{"fifo": "text.txt"}])
    case("fifo_calib_text", "hang", ["export", "{bad}/l2c_tiny.bin", "--plan", "{bad}/plan_w8.json", "--to", "gguf",
                                     "--calib-text", "{tmp}/calib.txt", "--tokenizer", TOK512, "-o", "{tmp}/o.gguf"],
         ["calib.txt", "FIFO"], setup=[{"fifo": "calib.txt"}])
    case("fifo_plan", "hang", ["plan", "show", "{tmp}/plan.json"], ["plan.json", "FIFO"], setup=[{"fifo": "plan.json"}])
    case("fifo_tokenizer", "hang", run("{bad}/l2c_tiny.bin")[:4] + ["--tokenizer", "{tmp}/tok.bin", "--text", TEXT],
         ["tok.bin", "FIFO"], setup=[{"fifo": "tok.bin"}])
    case("fifo_session", "hang", ["--backend", "cpu", "calibrate", "{bad}/l2c_tiny.bin", "--tokenizer", TOK512,
                                  "--text", TEXT, "--tokens", "8", "--session", "{tmp}/s.qsession"],
         ["s.qsession", "FIFO"], setup=[{"fifo": "s.qsession"}])
    case("fifo_sensitivity_table", "hang", ["plan", "auto", "{bad}/l2c_tiny.bin", "--budget-bits", "5",
                                            "--sensitivity", "{tmp}/sens.json", "-o", "{tmp}/p.json"],
         ["sens.json", "FIFO"], setup=[{"fifo": "sens.json"}])
    write(out, "st_shard_index/model.safetensors.index.json",
          json.dumps({"metadata": {}, "weight_map": {"lm_head.weight": "model-00001-of-00001.safetensors"}}).encode())
    case("fifo_shard", "hang", ["inspect", "{tmp}/shard"], ["model-00001-of-00001.safetensors", "FIFO"],
         setup=[{"copy": "st_shard_index", "to": "shard"}, {"fifo": "shard/model-00001-of-00001.safetensors"}])
    case("fifo_config_json", "hang", ["inspect", "{tmp}/cfg"], ["config.json", "FIFO"],
         setup=[{"copy": "hf_tiny/model.safetensors", "to": "cfg/model.safetensors"}, {"fifo": "cfg/config.json"}])
    case("fifo_tokenizer_json_beside", "hang", ["--backend", "cpu", "perplexity", "{tmp}/tj", "--text", TEXT],
         ["tokenizer.json", "FIFO"],
         setup=[{"copy": "hf_tiny", "to": "tj"}, {"fifo": "tj/tokenizer.json"}])
    case("fifo_export_side_file", "hang", ["export", "{tmp}/m", "--plan", "{bad}/plan_w8.json", "--to", "safetensors",
                                           "-o", "{tmp}/out"], ["generation_config.json", "FIFO"],
         setup=[{"copy": "hf_tok_beside_ok", "to": "m"}, {"fifo": "m/generation_config.json"}],
         note="the files copied beside a safetensors export (tokenizer, generation config)")
    case("chardev_model", "hang", ["inspect", "/dev/zero"], ["/dev/zero", "character device"])
    hf_llama_folder(out, "hf_tiny")
    case("hf_tiny_valid_base", "hang", ["inspect", "{bad}/hf_tiny"], [], exit_code=0)

    # A Split regex that backtracks catastrophically on a run of a's not followed by the end.
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
    write(out, "tok_regex_backtrack.json", tokenizer_json(512, pre=pre))
    write(out, "text_aaaab.txt", b"a" * 80 + b"b\n")
    case("tok_regex_catastrophic", "hang",
         ["--backend", "cpu", "perplexity", "{bad}/l2c_tiny.bin", "--tokenizer", "{bad}/tok_regex_backtrack.json",
          "--text", "{bad}/text_aaaab.txt"], ["tok_regex_backtrack.json", "pre_tokenizer", "time limit"],
         note="(a|aa)+$ on 80 a's and a b: hours of backtracking without ICU's time limit")

    # HDF5: external storage (/etc/passwd), an external link, a virtual dataset, in a session.
    def ext_storage(f):
        session_root(f)
        g = f.create_group("sensitivity")
        sensitivity_attrs(g)
        # The first dataset the reader opens: 64 one-byte layer names whose bytes are /etc/passwd's.
        g.create_group("layers").create_dataset("weight_name", shape=(64,), dtype="S1",
                                                external=[("/etc/passwd", 0, 64)], track_times=False)
    h5file(os.path.join(out, "session_external_storage.qsession"), ext_storage)
    calib = lambda s: ["--backend", "cpu", "calibrate", "{bad}/l2c_tiny.bin", "--tokenizer", TOK512, "--text", TEXT,
                       "--tokens", "8", "--session", s]
    case("session_external_storage", "hang", calib("{tmp}/s.qsession"),
         ["s.qsession", "/sensitivity/layers/weight_name", "external files"],
         setup=[{"copy": "session_external_storage.qsession", "to": "s.qsession"}], unchanged=["{tmp}/s.qsession"],
         note="its plan's bytes were /etc/passwd's: read, then written into the saved session")

    def ext_link(f):
        session_root(f)
        f["plans"] = h5py.ExternalLink("/tmp/qs-other-session.h5", "/plans")
    h5file(os.path.join(out, "session_external_link.qsession"), ext_link)
    case("session_external_link", "hang", calib("{tmp}/s.qsession"), ["s.qsession", "/plans", "external link"],
         setup=[{"copy": "session_external_link.qsession", "to": "s.qsession"}], unchanged=["{tmp}/s.qsession"])

    def vds(f):
        session_root(f)
        g = f.create_group("plans")
        # Low level, to switch the object times off (create_virtual_dataset cannot).
        space = h5py.h5s.create(h5py.h5s.SCALAR)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_obj_track_times(False)
        dcpl.set_virtual(space, b"/etc/passwd.h5", b"x", space)
        tid = h5py.h5t.C_S1.copy()
        tid.set_size(8)
        h5py.h5d.create(g.id, b"p", tid, space, dcpl=dcpl)
    h5file(os.path.join(out, "session_virtual_dataset.qsession"), vds)
    case("session_virtual_dataset", "hang", calib("{tmp}/s.qsession"), ["s.qsession", "/plans/p", "virtual"],
         setup=[{"copy": "session_virtual_dataset.qsession", "to": "s.qsession"}], unchanged=["{tmp}/s.qsession"])

    def soft(f):
        session_root(f)
        g = f.create_group("plans")
        g.create_dataset("real", data=np.bytes_("{}"), track_times=False)
        g["p"] = h5py.SoftLink("/plans/real")
    h5file(os.path.join(out, "session_soft_link.qsession"), soft)
    case("session_soft_link", "hang", calib("{tmp}/s.qsession"), ["s.qsession", "/plans/p", "soft"],
         setup=[{"copy": "session_soft_link.qsession", "to": "s.qsession"}], unchanged=["{tmp}/s.qsession"])


# ---- 3. memory bombs ----------------------------------------------------------------------------
def make_bombs(out, tmp):
    g = base.gguf_bytes(tmp, base.gguf_tensors(np.random.default_rng(15)))
    # 1100 arrays of 4096 u8: 4.5M values from 4.5 MB (each value is >= 16 bytes once read).
    inner = struct.pack("<IQ", 0, 4096) + b"\x07" * 4096
    kv = gguf_str("test.nested") + struct.pack("<IIQ", 9, 9, 1100) + inner * 1100
    write_gz(out, "gguf_nested_arrays.gguf", gguf_insert_kv(g, kv))
    case("gguf_nested_arrays", "memory", ["inspect", "{tmp}/gguf_nested_arrays.gguf"],
         ["gguf_nested_arrays.gguf", "test.nested", "values in all"],
         setup=[{"gunzip": "gguf_nested_arrays.gguf.gz", "to": "gguf_nested_arrays.gguf"}],
         note="1.4 GB from 48 MB before: every element of every level is counted against 2^22")
    # 140,000 empty tensors in one safetensors header (one name repeated: the count is refused
    # before the JSON is parsed, and the file compresses to nothing).
    entries = ",".join(['"t":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}'] * 140000)
    h = ("{" + entries + "}").encode()
    write_gz(out, "st_many_entries.safetensors", struct.pack("<Q", len(h)) + h)
    case("st_header_entries", "memory", ["inspect", "{tmp}/st_many_entries.safetensors"],
         ["st_many_entries.safetensors", "header", "entries"],
         setup=[{"gunzip": "st_many_entries.safetensors.gz", "to": "st_many_entries.safetensors"}],
         note="10^6 entries cost 1.2 GB before; 2^17 is the limit")
    # A GGUF vocabulary of 1024 tokens for an embedding of 32 rows (no llama.vocab_size key).
    toks = ["<t%d>" % i for i in range(1024)]
    gv = base.gguf_bytes(tmp, base.gguf_tensors(np.random.default_rng(15)), extra=lambda w: (
        w.add_tokenizer_model("llama"), w.add_token_list(toks), w.add_token_scores([0.0] * 1024),
        w.add_token_types([1] * 1024)))
    write(out, "gguf_vocab_1024_rows_32.gguf", gv)
    case("gguf_vocab_past_embedding", "memory",
         ["--backend", "cpu", "perplexity", "{bad}/gguf_vocab_1024_rows_32.gguf", "--text", TEXT, "--tokens", "8"],
         ["gguf_vocab_1024_rows_32.gguf", "tokenizer.ggml.tokens", "1024"],
         note="a 1,001,024-token vocabulary was accepted for a 1,024-row model")
    # Plans that are small files and large documents.
    plan = lambda entries: {"schema": "quantscope-plan", "version": 2, "defaults": {"weight": "fp16"},
                            "entries": entries}
    write_gz(out, "plan_many_entries.json", json.dumps(plan([{"layers": "x"}] * 70000)).encode())
    case("plan_entry_count", "memory", ["plan", "show", "{tmp}/plan_many_entries.json"],
         ["plan_many_entries.json", "entries", "70000"],
         setup=[{"gunzip": "plan_many_entries.json.gz", "to": "plan_many_entries.json"}])
    write_gz(out, "plan_many_selectors.json", json.dumps(plan([{"layers": ["x"] * 200000}])).encode())
    case("plan_selector_count", "memory", ["plan", "show", "{tmp}/plan_many_selectors.json"],
         ["plan_many_selectors.json", "entries[0].layers", "selectors"],
         setup=[{"gunzip": "plan_many_selectors.json.gz", "to": "plan_many_selectors.json"}])
    write_gz(out, "plan_long_selector.json", json.dumps(plan([{"layers": "?" * (10 << 20)}])).encode())
    case("plan_selector_length", "memory", ["plan", "show", "{tmp}/plan_long_selector.json", "--model",
                                            "{bad}/l2c_tiny.bin"],
         ["plan_long_selector.json", "entries[0].layers[0]", "characters"],
         setup=[{"gunzip": "plan_long_selector.json.gz", "to": "plan_long_selector.json"}])
    write_gz(out, "plan_3m_values.json", ("[" + ",".join(["0"] * 3000000) + "]").encode())
    case("plan_json_values", "memory", ["plan", "show", "{tmp}/plan_3m_values.json"],
         ["plan_3m_values.json", "values"],
         setup=[{"gunzip": "plan_3m_values.json.gz", "to": "plan_3m_values.json"}])
    # A session sensitivity table whose lists claim 5000 layers x 5000 formats.
    L = F = 5000

    def sens(f):
        session_root(f)
        g = f.create_group("sensitivity")
        sensitivity_attrs(g)
        ly = g.create_group("layers")
        ly.create_dataset("weight_name", data=np.array([b"w"] * L, dtype="S1"), track_times=False)
        ly.create_dataset("role", data=np.array([b"q"] * L, dtype="S1"), track_times=False)
        for k in ("block", "out_features", "in_features"):
            ly.create_dataset(k, data=np.zeros(L, np.int64), track_times=False)
        ly.create_dataset("parameters", data=np.zeros(L, np.uint64), track_times=False)
        g.create_dataset("formats", data=np.array([b"fp16"] * F, dtype="S4"), track_times=False)
    p = os.path.join(out, ".sens.qsession")
    h5file(p, sens)
    with open(p, "rb") as fh:
        write_gz(out, "session_sensitivity_5000.qsession", fh.read())
    os.remove(p)
    case("session_sensitivity_dims", "memory",
         ["--backend", "cpu", "calibrate", "{bad}/l2c_tiny.bin", "--tokenizer", TOK512, "--text", TEXT,
          "--tokens", "8", "--session", "{tmp}/s.qsession"], ["s.qsession", "/sensitivity/formats", "table cells"],
         setup=[{"gunzip": "session_sensitivity_5000.qsession.gz", "to": "s.qsession"}],
         unchanged=["{tmp}/s.qsession"], note="25M entries (1.5 GB) were allocated before the data was read")
    fmts = ["int%d-g%d-%s" % (b, gs, s) for b in (4, 8) for gs in (32, 64, 128) for s in ("sym", "asym")]
    write_gz(out, "sens_table_cells.json", json.dumps({
        "schema": "quantscope-sensitivity", "version": 1, "model_hash": "x", "tokens": 1, "base_perplexity": 1.0,
        "text_source": "t", "context": 2, "formats": fmts,
        "layers": [{"weight_name": "w"}] * 200000}, separators=(",", ":")).encode())
    case("sensitivity_json_dims", "memory", ["plan", "auto", "{bad}/l2c_tiny.bin", "--budget-bits", "5",
                                             "--sensitivity", "{tmp}/sens_table_cells.json", "-o", "{tmp}/p.json"],
         ["sens_table_cells.json", "layers", "table cells"],
         setup=[{"gunzip": "sens_table_cells.json.gz", "to": "sens_table_cells.json"}],
         note="200,000 layers x 12 formats: the table was sized before its figures were read")
    write(out, "sens_other_shape.json", json.dumps({
        "schema": "quantscope-sensitivity", "version": 1, "model_hash": "", "tokens": 1, "base_perplexity": 1.0,
        "text_source": "t", "context": 2, "formats": ["fp16"],
        "layers": [{"weight_name": "layers.0.attention.wq.weight", "out_features": 99, "in_features": 16}]},
        indent=1).encode())
    case("sensitivity_table_vs_model", "accepted", ["plan", "auto", "{bad}/l2c_tiny.bin", "--budget-bits", "5",
                                                    "--sensitivity", "{bad}/sens_other_shape.json", "-o",
                                                    "{tmp}/p.json"],
         ["sens_other_shape.json", "layers[0]", "[99, 16] in the table"],
         note="a table's layer of another shape than the model's lent it its figures")
    # Texts: /dev/zero, a 2 GB sparse file (whole: refused; with --tokens: only its prefix is read).
    pp = lambda text, *extra: ["--backend", "cpu", "perplexity", "{bad}/l2c_tiny.bin", "--tokenizer", TOK512,
                               "--text", text] + list(extra)
    case("text_dev_zero", "memory", pp("/dev/zero", "--tokens", "8"), ["/dev/zero", "character device"],
         note="4.3 GB read before the token cap applied")
    case("text_sparse_2gb_whole", "memory", pp("{tmp}/sparse.txt"), ["sparse.txt", "over the limit"],
         setup=[{"sparse": "sparse.txt", "size": 2 << 30}])
    case("text_sparse_2gb_prefix", "memory", pp("{tmp}/sparse.txt", "--tokens", "16"), [], exit_code=0,
         setup=[{"sparse": "sparse.txt", "size": 2 << 30}], note="reads (16 + 64) x the longest token bytes")


# ---- 4. accepted when they should not be ----------------------------------------------------------
def make_accepted(out, tmp):
    g = base.gguf_bytes(tmp, base.gguf_tensors(np.random.default_rng(15)))
    lay = base.GgufLayout(g)
    # attn_norm (F32 [16]) made empty and placed inside attn_q; attn_k overlaps attn_q behind it.
    t1, t2, t3 = lay.tensors[1], lay.tensors[2], lay.tensors[3]
    ne_pos = t1["type_pos"] - 8  # 1-D: ne[0] sits before the type
    e = base.patch(g, ne_pos, "<Q", 0)
    e = base.patch(e, t1["off_pos"], "<Q", t2["offset"] + 32)
    e = base.patch(e, t3["off_pos"], "<Q", t2["offset"] + 64)
    write(out, "gguf_overlap_behind_empty.gguf", e)
    case("gguf_overlap_behind_empty", "accepted", ["inspect", "{bad}/gguf_overlap_behind_empty.gguf"],
         ["gguf_overlap_behind_empty.gguf", "blk.0.attn_k.weight", "overlaps", "blk.0.attn_q.weight"],
         note="an empty tensor sorted between two overlapping ones hid the overlap")
    st = base.st_raw({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 16)
    hdr = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}'
    write(out, "st_duplicate_key.safetensors", struct.pack("<Q", len(hdr)) + hdr + b"\0" * 16)
    case("st_duplicate_key", "accepted", ["inspect", "{bad}/st_duplicate_key.safetensors"],
         ["st_duplicate_key.safetensors", "a: ", "twice"], note="the last one won")
    write(out, "st_metadata_not_string.safetensors",
          base.st_raw({"__metadata__": {"format": 5}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
                      b"\0" * 8))
    case("st_metadata_not_string", "accepted", ["inspect", "{bad}/st_metadata_not_string.safetensors"],
         ["st_metadata_not_string.safetensors", "__metadata__.format", "string"])
    del st
    hf_llama_folder(out, "hf_tok_beside_mismatch", tokenizer=tokenizer_json(20))
    case("tok_beside_vocab_mismatch", "accepted",
         ["--backend", "cpu", "perplexity", "{bad}/hf_tok_beside_mismatch", "--text", TEXT, "--tokens", "8"],
         ["hf_tok_beside_mismatch/tokenizer.json", "vocabulary size", "20 tokens", "32"],
         note="the same file given by --tokenizer was refused, beside the model it was used")
    hf_llama_folder(out, "hf_tok_beside_ok", tokenizer=tokenizer_json(32))
    case("tok_beside_valid_base", "accepted",
         ["--backend", "cpu", "perplexity", "{bad}/hf_tok_beside_ok", "--text", "{bad}/text_punct.txt", "--tokens", "8"], [],
         exit_code=0)
    write(out, "tok_merge_non_token.json", tokenizer_json(512, merges=["a zz"]))
    case("tok_merge_non_token", "accepted",
         ["--backend", "cpu", "perplexity", "{bad}/l2c_tiny.bin", "--tokenizer", "{bad}/tok_merge_non_token.json",
          "--text", TEXT, "--tokens", "8"], ["tok_merge_non_token.json", "merges[0]", "not in the vocabulary"])
    write(out, "tok_merge_result_non_token.json", tokenizer_json(512, merges=["a b"]))
    case("tok_merge_result_non_token", "accepted",
         ["--backend", "cpu", "perplexity", "{bad}/l2c_tiny.bin", "--tokenizer",
          "{bad}/tok_merge_result_non_token.json", "--text", TEXT, "--tokens", "8"],
         ["tok_merge_result_non_token.json", "merges[0]", "merged token"])
    hf_llama_folder(out, "hf_i32_weight", tensors_over={
        "model.layers.0.self_attn.q_proj.weight": np.arange(256, dtype=np.int32).reshape(16, 16)})
    case("st_i32_weight", "accepted", ["inspect", "{bad}/hf_i32_weight"],
         ["hf_i32_weight", "model.layers.0.self_attn.q_proj.weight", "I32"])


# ---- 5. messages --------------------------------------------------------------------------------
def make_messages(out):
    write(out, "l2c_ctx1.bin", l2c_model(dict(seq=1)))
    case("ctx_from_file", "message", ["--backend", "cpu", "perplexity", "{bad}/l2c_ctx1.bin", "--tokenizer", TOK512,
                                      "--text", TEXT, "--tokens", "8"],
         ["l2c_ctx1.bin", "context_length", "context length is 1"],
         note="said \"--ctx must be at least 2\" when --ctx was not given")
    write(out, "empty.txt", b"")
    case("text_too_few_tokens", "message", ["--backend", "cpu", "perplexity", "{bad}/l2c_tiny.bin", "--tokenizer",
                                            TOK512, "--text", "{bad}/empty.txt"],
         ["empty.txt", "tokens", "too few tokens"])
    case("text_is_directory", "message", ["--backend", "cpu", "perplexity", "{bad}/l2c_tiny.bin", "--tokenizer",
                                          TOK512, "--text", "{tmp}/texts"], ["texts", "is a directory"],
         setup=[{"dir": "texts"}])
    case("plan_is_directory", "message", ["plan", "show", "{tmp}/plans"], ["plans", "is a directory"],
         setup=[{"dir": "plans"}], note="was reported as a plan of 9.2e18 bytes")
    write(out, "plan_version_u64max.json", b'{"schema": "quantscope-plan", "version": 18446744073709551615}\n')
    case("plan_version_unsigned", "message", ["plan", "show", "{bad}/plan_version_u64max.json"],
         ["plan_version_u64max.json", "version", "18446744073709551615"], note="was shown as schema -1")
    def version_u64(f):
        session_root(f)
        f.attrs["schema_version"] = np.uint64(2 ** 64 - 1)
    h5file(os.path.join(out, "session_version_u64max.qsession"), version_u64)
    case("session_version_unsigned", "message",
         ["--backend", "cpu", "calibrate", "{bad}/l2c_tiny.bin", "--tokenizer", TOK512, "--text", TEXT,
          "--tokens", "8", "--session", "{tmp}/s.qsession"], ["s.qsession", "schema_version", "18446744073709551615"],
         setup=[{"copy": "session_version_u64max.qsession", "to": "s.qsession"}], unchanged=["{tmp}/s.qsession"],
         note="an unsigned 2^64-1 was read as a clipped int64")
    write(out, "plan_w8.json", json.dumps({"schema": "quantscope-plan", "version": 2,
                                           "defaults": {"weight": "int8-sym", "group_size": "channel"},
                                           "entries": []}, indent=1).encode())


# ---- 6. what the fuzzers found (tests/fuzz/, docs/reliability.md) -------------------------------
# Each reproducer is kept in the fuzzer's seed corpus (tests/fuzz/corpus/TARGET/regress_*), or,
# when it crashes libhdf5 itself in process, in tests/fuzz/hdf5_crashes/ (the product reads
# sessions in a child process; the fuzzer does not), and run here through the CLI, under the
# corpus's limits.
FUZZ_REGRESSIONS = [
    ("session", "regress_hdf5_metadata_size.qsession", "session_hdf5_metadata_size",
     "libhdf5 sizes a metadata buffer from the file (1.2 TB) before checking it against the file's "
     "end (fuzz_session; ASan's allocator refused it)"),
    ("session", "regress_hdf5_open_leak.qsession", "session_hdf5_open_leak",
     "a root object header that fails to decode: libhdf5 loses 56 bytes on that error path (fuzz_session)"),
    ("session", "regress_hdf5_addr_wrap.qsession", "session_hdf5_address_wraps",
     "one byte of the root's link-info heap address: near 2^64, it wrapped around in libhdf5's metadata "
     "accumulator (SIGSEGV before; reads now bypass it), then the link table is unreadable (fuzz_session)",
     ["/calibration", "corrupt group"]),
    ("session", "regress_hdf5_compact.qsession", "session_hdf5_compact_layout",
     "a dataset turned compact with a buffer smaller than its extent: libhdf5 read past it (SIGSEGV "
     "before; fuzz_session)", ["/speed/token_counts", "compact layout"]),
    ("hdf5_crashes", "attr_name_overread.qsession", "session_hdf5_library_crash",
     "an attribute message whose name runs past its object header: libhdf5 1.10 copies past the buffer "
     "(SIGSEGV before; no check of ours can see it: the file is parsed in a child process now; fuzz_session). "
     "What lies past the buffer decides how libhdf5 fails (a crash in the child, or a garbled name read "
     "as a missing attribute, depending on the build's memory layout): either way exit 2 naming the file",
     ["s.qsession"]),
]


def make_fuzz_regressions(out):
    for target, name, case_name, note, *expect in FUZZ_REGRESSIONS:
        folder = ["hdf5_crashes"] if target == "hdf5_crashes" else ["corpus", target]
        with open(os.path.join(ROOT, "tests", "fuzz", *folder, name), "rb") as f:
            write(out, name, f.read())
        if target in ("session", "hdf5_crashes"):
            case(case_name, "fuzz",
                 ["--backend", "cpu", "calibrate", "{bad}/l2c_tiny.bin", "--tokenizer", TOK512, "--text", TEXT,
                  "--tokens", "8", "--session", "{tmp}/s.qsession"], ["s.qsession"] + (expect[0] if expect else ["HDF5"]),
                 setup=[{"copy": name, "to": "s.qsession"}], unchanged=["{tmp}/s.qsession"], note=note)
        else:
            raise ValueError(target)


CLASS_TITLES = [("crash", "crashes (SIGFPE, SIGSEGV, uncaught exceptions)"),
                 ("hang", "hangs and file disclosure (FIFOs, devices, HDF5 links/storage, regex)"),
                 ("memory", "memory bombs (500 MB rule)"), ("accepted", "accepted when they should not be"),
                 ("message", "exit 2 but unclear messages"), ("fuzz", "found by the fuzzers (regressions)"),
                 ("base", "valid bases")]


def table():
    """Markdown for docs/reliability.md: the classes with their counts, then every case."""
    with open(os.path.join(ROOT, "tests", "data", "bad2", "manifest.json")) as f:
        m = json.load(f)
    lim = m["limits"]
    print("%d cases, each under %d MB of data (RLIMIT_DATA) and %d s:\n" %
          (len(m["cases"]), lim["address_space"] >> 20, lim["timeout_s"]))
    print("| class | cases | of which valid (exit 0) |\n|---|---|---|")
    for key, title in CLASS_TITLES:
        cs = [c for c in m["cases"] if c["class"] == key]
        print("| %s | %d | %d |" % (title, len(cs), sum(c["exit"] == 0 for c in cs)))
    print("\n| case | class | command | exit | the error line contains | note |\n|---|---|---|---|---|---|")
    for c in m["cases"]:
        cmd = " ".join(a.replace("{bad}/", "").replace("{datasets}/", "").replace("{tmp}/", "")
                       for a in c["args"])
        if len(cmd) > 70:
            cmd = cmd[:69] + "…"
        setup = ", ".join("%s %s" % next(iter(st.items())) for st in c.get("setup", []))
        note = "; ".join(x for x in [c["note"], ("made at run time: " + setup) if setup else ""] if x)
        print("| %s | %s | `%s` | %d | %s | %s |" % (c["case"], c["class"], cmd.replace("|", "\\|"), c["exit"],
                                                     ", ".join("`%s`" % e for e in c["expect"]) or "—", note))


def main():
    if sys.argv[1:] == ["--table"]:
        return table()
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "tests", "data", "bad2")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):  # start clean: stale cases would otherwise linger
        p = os.path.join(out, name)
        shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    tmp = os.path.join(out, ".tmp.gguf")
    write(out, "l2c_tiny.bin", l2c_model())
    case("l2c_valid_base", "base", ["inspect", "{bad}/l2c_tiny.bin"], [], exit_code=0)
    make_crashes(out, tmp)
    make_hangs(out)
    make_bombs(out, tmp)
    make_accepted(out, tmp)
    make_messages(out)
    make_fuzz_regressions(out)
    classes = {}
    for c in cases:
        classes[c["class"]] = classes.get(c["class"], 0) + 1
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump({"generated_by": "scripts/make_hostile_corpus2.py",
                   "limits": {"address_space": 500 << 20, "timeout_s": 10},
                   "classes": classes, "cases": cases}, f, indent=1)
        f.write("\n")
    print("%d cases in %s: %s" % (len(cases), out, classes))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""SentencePiece-style (Metaspace) tokenizer.json references written by Hugging Face code.

  make_spm_tokenizer_fixtures.py --out DIR [--llama2 TOKENIZER_BIN]   # the committed fixtures
  make_spm_tokenizer_fixtures.py --live TEST_EXE [--llama2 TOKENIZER_BIN]
      write to a temporary folder, run TEST_EXE metaspaceTokenizerJsonMatchesTransformers on it
      (QS_SPM_REF_DIR); exit 77 (skipped) when transformers or tokenizers are missing.

Writes, for each case, OUT_DIR/<case>/tokenizer.json (+ tokenizer_config.json) and
OUT_DIR/<case>/expected.json: {"texts": [...], "ids": [[...], ...]} as transformers encodes them
(add_special_tokens=True: BOS as the file says, special tokens in the text matched), and
"decoded": transformers' decode of those ids with skip_special_tokens.

  tiny_v5      a BPE trained by `tokenizers` (byte fallback, <unk>/<s>/</s>, the 256 byte tokens)
               and written by transformers 5's LlamaTokenizer: Metaspace pre-tokenizer,
               prepend_scheme "first", split false; no normalizer.
  tiny_legacy  the same vocabulary and merges laid out as transformers 4 converted Llama 2:
               normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer.
  tiny_split   Metaspace with split = true and prepend_scheme "always" (Mistral-style layouts).
  llama2       (with --llama2) Llama 2's 32,000-token vocabulary from llama2.c's tokenizer.bin,
               merges made from the scores by transformers' generate_merges, in the v5 layout.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

SKIP = 77

TEXTS = [
    "Hello world",
    " Hello world",
    "Hello  world, with  two spaces and\ta tab",
    "line one\nline two\n\n  indented",
    "The café serves crème brûlée.",
    "日本語のテキスト and emoji 🦙🙂",
    "numbers 1234567 and 3.14159",
    "<s>special tokens</s> in text",
    "text then <s> inside",
    "unknown ☃ snowman ☃☃",
    "",
    " ",
    "   leading spaces",
    "trailing spaces   ",
    "ends with newline\n",
]

TRAIN = """The quick brown fox jumps over the lazy dog. Hello world, hello there.
Once upon a time there was a little girl who lived in a village near the forest.
She liked to walk and talk with the animals; the fox and the dog were her friends.
Numbers like 12 and 345 appear, and tabs\tand  double  spaces too.
The café served crème brûlée and the world was calm. line one line two indented text.
""" * 4


def byte_tokens():
    return [f"<0x{b:02X}>" for b in range(256)]


def train_tiny():
    tok = Tokenizer(BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens(),
                                  show_progress=False)
    tok.train_from_iterator(TRAIN.splitlines(), trainer)
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]


def write_case(out: Path, name: str, fast, texts):
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(d)
    for extra in ("special_tokens_map.json", "chat_template.jinja"):
        (d / extra).unlink(missing_ok=True)
    ids = [fast.encode(t, add_special_tokens=True) for t in texts]
    decoded = [fast.decode(x, skip_special_tokens=True) for x in ids]
    (d / "expected.json").write_text(
        json.dumps({"texts": texts, "ids": ids, "decoded": decoded}, ensure_ascii=False, indent=0) + "\n")


def layout(vocab, merges, kind):
    """A tokenizers.Tokenizer with Llama's model and one of three text layouts."""
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    dec = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(content=" ", left=1)]
    if kind == "legacy":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.pre_tokenizer = None
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.decoder = decoders.Sequence(dec)
    from tokenizers.processors import TemplateProcessing
    tok.post_processor = TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", vocab["<s>"])])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def read_llama2c(path: Path):
    data = path.read_bytes()
    off = 4
    vocab, scores = {}, {}
    i = 0
    while off < len(data):
        score, n = struct.unpack_from("<fi", data, off)
        off += 8
        piece = data[off:off + n].decode("utf-8")
        off += n
        piece = {0: "<unk>", 1: "<s>", 2: "</s>"}.get(i, piece.replace(" ", "▁"))
        vocab.setdefault(piece, i)
        scores[piece] = score
        i += 1
    return vocab, scores


def generate(out: Path, llama2: str | None):
    vocab, merges = train_tiny()
    v5 = LlamaTokenizer(vocab=vocab, merges=merges, add_prefix_space=True, add_bos_token=True)
    write_case(out, "tiny_v5", v5, TEXTS)
    write_case(out, "tiny_legacy", layout(vocab, merges, "legacy"), TEXTS)
    write_case(out, "tiny_split", layout(vocab, merges, "split"), TEXTS)
    if llama2:
        vocab, scores = read_llama2c(Path(llama2))
        merges = generate_merges(vocab, scores)
        fast = LlamaTokenizer(vocab=vocab, merges=merges, add_prefix_space=True, add_bos_token=True)
        write_case(out, "llama2", fast, TEXTS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--live", metavar="TEST_EXE")
    ap.add_argument("--llama2", metavar="TOKENIZER_BIN", help="llama2.c's tokenizer.bin of Llama 2")
    a = ap.parse_args()
    try:
        global Tokenizer, decoders, normalizers, pre_tokenizers, trainers, BPE
        global LlamaTokenizer, PreTrainedTokenizerFast, generate_merges
        from tokenizers import Tokenizer, decoders, normalizers, pre_tokenizers, trainers
        from tokenizers.models import BPE
        from transformers import LlamaTokenizer, PreTrainedTokenizerFast
        from transformers.tokenization_utils_base import generate_merges
    except ImportError as e:
        print(f"SKIP: transformers/tokenizers not importable ({e}); the committed fixtures still run "
              "in test_core_tokenizer", file=sys.stderr)
        return SKIP
    llama2 = a.llama2 if a.llama2 and Path(a.llama2).is_file() else None
    if a.out:
        generate(Path(a.out), llama2)
        return 0
    if a.live:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp), llama2)
            env = dict(os.environ, QS_SPM_REF_DIR=tmp)
            return subprocess.call([a.live, "metaspaceTokenizerJsonMatchesTransformers"], env=env)
    ap.error("give --out DIR or --live TEST_EXE")


if __name__ == "__main__":
    sys.exit(main())

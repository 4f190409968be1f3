"""Writes tiny random Hugging Face models with transformers (save_pretrained), one folder per
architecture we open, for the export tests (tests/python/check_export_tensor_lists.py and
scripts/export/roundtrip_matrix.sh). BERT also gets what older checkpoints (all-MiniLM) carry:
an int64 `embeddings.position_ids` buffer in the file and a WordPiece tokenizer.json.
usage: make_tiny_hf_models.py OUTDIR [ARCH...]   (default: every architecture below)"""
import json
import os
import sys

import torch
import transformers as tf
from safetensors.torch import load_file, save_file

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def configs():
    return {
        "llama": tf.LlamaConfig(**COMMON, tie_word_embeddings=False),
        "mistral": tf.MistralConfig(**COMMON, tie_word_embeddings=False),
        "qwen2": tf.Qwen2Config(**COMMON, tie_word_embeddings=True),
        "qwen3": tf.Qwen3Config(**COMMON, head_dim=16, tie_word_embeddings=True),
        "gemma": tf.GemmaConfig(**COMMON, head_dim=16),
        "gemma2": tf.Gemma2Config(**COMMON, head_dim=16),
        "phi3": tf.Phi3Config(**COMMON, tie_word_embeddings=False, pad_token_id=0),
        "gpt2": tf.GPT2Config(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=128),
        "bert": tf.BertConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, max_position_embeddings=128),
    }


def model_for(arch, cfg):
    if arch == "bert":
        return tf.BertModel(cfg)
    return tf.AutoModelForCausalLM.from_config(cfg)


def wordpiece_tokenizer(folder, vocab_size):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])}
    for c in "abcdefghijklmnopqrstuvwxyz":
        vocab.setdefault(c, len(vocab))
        vocab.setdefault("##" + c, len(vocab))
    while len(vocab) < vocab_size:
        vocab["w%d" % len(vocab)] = len(vocab)
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.save(os.path.join(folder, "tokenizer.json"))


def main():
    out = sys.argv[1]
    want = sys.argv[2:]
    torch.manual_seed(0)
    for arch, cfg in configs().items():
        if want and arch not in want:
            continue
        folder = os.path.join(out, arch)
        os.makedirs(folder, exist_ok=True)
        model = model_for(arch, cfg)
        model.save_pretrained(folder, safe_serialization=True)
        if arch == "bert":
            path = os.path.join(folder, "model.safetensors")
            t = load_file(path)
            t["embeddings.position_ids"] = torch.arange(cfg.max_position_embeddings, dtype=torch.int64)[None, :]
            save_file(t, path, metadata={"format": "pt"})
            wordpiece_tokenizer(folder, cfg.vocab_size)
        print(folder)


if __name__ == "__main__":
    main()

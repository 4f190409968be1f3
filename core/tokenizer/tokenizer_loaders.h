#pragma once
// Building tokenizers from files. Every loader validates what it reads (counts against the bytes
// left, ids against the vocabulary, lengths against each other) and throws qs::Error (BadInput)
// naming the file and the field; Unsupported for a valid file of a kind we do not handle.
#include <memory>
#include <string>

#include "core/tokenizer/bpe_tokenizer.h"
#include "core/tokenizer/sentencepiece_model.h"
#include "core/tokenizer/spm_tokenizer.h"

namespace qs {

class ModelFile;

// llama2.c tokenizer.bin: i32 max_token_length, then per token f32 score, i32 length, bytes.
// The file does not store the vocabulary size: pass the model's (as run.c does), or -1 to read
// to the end of the file. BOS = 1, EOS = 2, spaces stored as " "; encodes in Llama2c mode by
// default (set `mode` for llama.cpp's).
std::unique_ptr<SpmTokenizer> loadLlama2cTokenizer(const std::string& path, int32_t vocabSize = -1,
                                                   SpmEncodeMode mode = SpmEncodeMode::Llama2c);

// From a model's GGUF metadata (tokenizer.ggml.*): "llama" → SpmTokenizer, "gpt2" →
// BpeTokenizer with the pre-tokenizer named by tokenizer.ggml.pre. Throws Unsupported for other
// tokenizer models, BadInput for malformed entries.
std::unique_ptr<Tokenizer> tokenizerFromGguf(const ModelFile& model);

// Hugging Face tokenizer.json with a BPE model and a ByteLevel pre-tokenizer (optionally after
// Split-by-regex and Digits steps).
std::unique_ptr<BpeTokenizer> loadHfTokenizerJson(const std::string& path);

// Any of the above, detected from the content: GGUF magic, JSON, a SentencePiece ModelProto
// (tokenizer.model, through libsentencepiece), else a llama2.c tokenizer.bin.
std::unique_ptr<Tokenizer> openTokenizer(const std::string& path, int32_t vocabSize = -1);

// The tokenizer that belongs to an opened model: the GGUF's own metadata, or tokenizer.json
// (else tokenizer.model) beside a safetensors model; nullptr when there is none (llama2.c checkpoints keep theirs in a
// separate file: use openTokenizer).
std::unique_ptr<Tokenizer> tokenizerForModel(const ModelFile& model);

}  // namespace qs

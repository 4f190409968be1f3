#pragma once
// SentencePiece `.model` files (tokenizer.model beside Llama 2 / Mistral / TinyLlama / Gemma
// checkpoints) through the reference library, Debian's libsentencepiece: the library encodes
// and decodes (BPE and Unigram models, its normalizer, dummy prefix, byte fallback), the
// vocabulary (pieces, scores, types, BOS/EOS/UNK) is copied out for the rest of Quantscope.
//
// Special tokens written in the text (control pieces such as <s>, with EncodeOptions::
// parseSpecial) are split off first and each run of text between them is encoded by the library
// on its own — what transformers' sentencepiece-backed tokenizers do.
#include <memory>

#include "core/tokenizer/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace qs {

class SentencePieceModelTokenizer final : public Tokenizer {
 public:
  ~SentencePieceModelTokenizer() override;
  std::string_view kindName() const override { return "sentencepiece-model"; }
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt = {}) const override;
  std::string tokenText(int32_t id, bool special = false) const override;
  // The library's decode (its own handling of the dummy prefix and byte pieces); control pieces
  // appear only when `special`.
  std::string decode(std::span<const int32_t> ids, bool special = false) const override;

 private:
  friend std::unique_ptr<SentencePieceModelTokenizer> loadSentencePieceModel(const std::string&);
  SentencePieceModelTokenizer(Vocabulary v, std::unique_ptr<sentencepiece::SentencePieceProcessor> sp);
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

// Loads a serialized ModelProto. Throws BadInput naming the file for what the library refuses
// (with its message) and for files over 64 MiB.
std::unique_ptr<SentencePieceModelTokenizer> loadSentencePieceModel(const std::string& path);

// Whether `head` (the first bytes of a file) looks like a serialized SentencePiece ModelProto:
// field 1 (pieces, length-delimited) holding field 1 (piece, a string).
bool looksLikeSentencePieceModel(std::span<const std::byte> head);

}  // namespace qs

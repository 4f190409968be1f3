#pragma once
// SentencePiece-style BPE with byte fallback (Llama 1/2, TinyLlama, Mistral; llama2.c's
// tokenizer.bin; GGUF tokenizer.ggml.model = "llama"). Merges are chosen by token *score*, not
// by a merge list: two neighbours merge when their concatenation is a token, best score first.
//
// Two encoders, for two references that disagree slightly:
//   LlamaCpp  llama.cpp's llm_tokenizer_spm (what its test vectors expect): spaces escaped to
//             the space symbol ("▁"), a space prefixed to each run of raw text that starts the
//             input or follows a special token (add_space_prefix), text split into UTF-8
//             characters, a priority queue of mergeable neighbours (highest score, then
//             leftmost), and characters no token covers emitted as byte tokens <0xXX>.
//   Llama2c   llama2.c's run.c encode(): one "dummy prefix" space token first (for non-empty
//             text), each UTF-8 character looked up (else its bytes as byte tokens, up front),
//             then repeatedly the single best-scoring adjacent merge over the whole sequence
//             (leftmost on ties) until none applies. O(n²) in the text length — meant for
//             prompts; the runtime uses it to reproduce llama2.c's outputs exactly.
// Both ignore special tokens in Llama2c mode (run.c has none); LlamaCpp mode honours them.
#include "core/tokenizer/tokenizer.h"

namespace qs {

enum class SpmEncodeMode { LlamaCpp, Llama2c };

struct SpmOptions {
  std::string spaceSymbol = "\xE2\x96\x81";  // "▁" (U+2581); llama2.c files store " "
  bool addSpacePrefix = true;
  bool addBos = true;  // the model's default (GGUF tokenizer.ggml.add_bos_token)
  SpmEncodeMode mode = SpmEncodeMode::LlamaCpp;
};

class SpmTokenizer final : public Tokenizer {
 public:
  SpmTokenizer(Vocabulary v, SpmOptions o);

  std::string_view kindName() const override { return "sentencepiece-bpe"; }
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt = {}) const override;
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt,
                              SpmEncodeMode mode) const;
  std::string tokenText(int32_t id, bool special = false) const override;

  const SpmOptions& options() const { return opt_; }
  int32_t byteToken(uint8_t b) const { return byteTokens_[b]; }

 private:
  SpmOptions opt_;
  int32_t byteTokens_[256];

  void encodeLlamaCpp(std::string_view text, std::vector<int32_t>& out) const;
  void encodeLlama2c(std::string_view text, std::vector<int32_t>& out) const;
  std::string escape(std::string_view text) const;
};

}  // namespace qs

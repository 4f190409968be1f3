#pragma once
// BPE by merge rank: GPT-2 byte-level BPE (GPT-2, Llama 3, Qwen2, SmolLM; GGUF
// tokenizer.ggml.model = "gpt2"; HF tokenizer.json with a BPE model and ByteLevel
// pre-tokenizer), and the SentencePiece-style layout of HF tokenizer.json (Llama 2, Mistral,
// TinyLlama: Metaspace pre-tokenizer or Prepend/Replace normalizer, byte fallback), where step 3
// is replaced by the Metaspace rules and characters without a token become byte tokens.
//
//   1. special tokens are split off (see EncodeOptions);
//   2. pre-tokenization: each regex in `splitRegexes` splits every piece into its matches and
//      the text between them ("Isolated" in HF terms), in order — GPT-2's pattern is
//      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+;
//      the regexes run on ICU's engine (Unicode categories, look-ahead);
//   3. each piece's bytes are mapped to printable characters (GPT-2's bytes_to_unicode:
//      ' ' → 'Ġ', '\n' → 'Ċ', …) and split into characters;
//   4. adjacent symbols merge by merge rank (lowest first, leftmost on ties) until no listed
//      merge applies; each symbol is then a token (a symbol without one is emitted byte by
//      byte, as llama.cpp does).
#include <memory>

#include "core/tokenizer/tokenizer.h"

namespace qs {

// The pre-tokenizer patterns of the common models (llama.cpp's llama-vocab.cpp, HF tokenizer.json).
extern const char* const kGpt2SplitRegex;
extern const char* const kLlama3SplitRegex;
extern const char* const kQwen2SplitRegex;

// One step of a tokenizer.json normalizer, applied in order to each run of raw text.
struct NormalizerStep {
  enum Kind { Prepend, Replace, Nfc } kind = Replace;
  std::string a, b;  // Prepend: a = prefix; Replace: a → b (literal strings)
};

struct BpeOptions {
  std::vector<std::string> splitRegexes{kGpt2SplitRegex};
  bool addPrefixSpace = false;  // HF ByteLevel(add_prefix_space): " " before text not starting with one
  bool addBos = false;
  // false: SentencePiece-style text (HF Metaspace, Llama 2 / Mistral / TinyLlama tokenizer.json):
  // bytes are not mapped; spaces become `metaspace`; characters without a token fall back to
  // the byte tokens <0xXX> (byteFallback) or to unk.
  bool byteLevel = true;
  std::vector<NormalizerStep> normalizer;  // tokenizer.json "normalizer" (Sequence flattened)
  // Metaspace pre-tokenizer (empty `metaspace`: none): " " → metaspace, then the prefix by
  // `prepend` (Always: every run of text; First: only the run at the start of the input; never
  // when the run already starts with it), then with `metaspaceSplit` a split before each one.
  enum class Prepend { Never, First, Always };
  std::string metaspace;
  Prepend prepend = Prepend::Never;
  bool metaspaceSplit = false;
  bool byteFallback = false;  // BPE.byte_fallback
  bool fuseUnk = false;       // BPE.fuse_unk: consecutive unknown characters give one unk
  bool ignoreMerges = false;  // BPE.ignore_merges: a word that is a token is taken whole
  bool stripLeadingSpace = false;  // decoder Strip(" ", start 1): decode drops the first space
};

class BpeTokenizer final : public Tokenizer {
 public:
  // `merges` are "left right" pairs in rank order. Throws BadInput (naming `source` and the
  // merge) when a merge is not two space-separated parts, or a regex does not compile.
  BpeTokenizer(Vocabulary v, const std::vector<std::string>& merges, BpeOptions o,
               const std::string& source);
  ~BpeTokenizer() override;

  std::string_view kindName() const override { return opt_.byteLevel ? "byte-level-bpe" : "metaspace-bpe"; }
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt = {}) const override;
  std::string tokenText(int32_t id, bool special = false) const override;

  // The pre-tokenizer alone (for tests and the GUI): the pieces, before byte mapping.
  std::vector<std::string> preTokenize(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  BpeOptions opt_;
  int32_t byteIds_[256];  // <0xXX> tokens (SentencePiece-style only; -1 where absent)
  void encodeWord(const std::string& mapped, std::vector<int32_t>& out) const;
  std::string normalize(std::string_view text, bool atInputStart) const;
};

// GPT-2's byte ↔ printable-character table.
const std::string& byteToUnicode(uint8_t b);  // UTF-8 of the character standing for byte b

}  // namespace qs

#pragma once
// Tokenizers: text ⇄ token ids. Two families, one interface:
//   SentencePiece-style BPE with byte fallback (SpmTokenizer): Llama 1/2, TinyLlama, Mistral,
//     llama2.c's tokenizer.bin files, GGUF tokenizer.ggml.model = "llama".
//   GPT-2 byte-level BPE (BpeTokenizer): GPT-2, Llama 3, Qwen2, SmolLM; GGUF "gpt2" and HF
//     tokenizer.json.
// Loaders (tokenizer_loaders.h) build them from files; every loader checks the file the way the
// model readers do (counts against bytes, ids against the vocabulary) and throws BadInput.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qs {

// GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : uint8_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

struct Vocabulary {
  std::vector<std::string> tokens;  // as stored: "▁the", "<0x0A>", "Ġthe", "<s>"
  std::vector<float> scores;        // SentencePiece merge priorities (empty for BPE)
  std::vector<TokenType> types;
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  // Every id that ends generation: eos, GGUF eot/eom ids, the eos_token_id list of a Hugging
  // Face config.json / generation_config.json. Filled by the loaders; eos is added when absent.
  std::vector<int32_t> stopIds;

  int32_t size() const { return int32_t(tokens.size()); }
  // text → id; for duplicate texts the last id wins (as llama.cpp's token_to_id does).
  int32_t find(std::string_view text) const;
  void buildIndex();

 private:
  std::unordered_map<std::string, int32_t> index_;
};

struct EncodeOptions {
  bool addBos = false;
  bool addEos = false;
  // Match control tokens written in the text ("<s>", "<|endoftext|>"). User-defined tokens are
  // always matched, as llama.cpp does.
  bool parseSpecial = false;
};

class Tokenizer {
 public:
  virtual ~Tokenizer();

  virtual std::string_view kindName() const = 0;  // "sentencepiece-bpe", "byte-level-bpe"
  virtual std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opt = {}) const = 0;
  // The bytes one token stands for in text: byte tokens give their byte, SentencePiece's ▁ and
  // GPT-2's Ġ give a space; control tokens give their text only when `special`.
  virtual std::string tokenText(int32_t id, bool special = false) const = 0;
  // Joins tokenText. A leading space produced by the tokenizer's space prefix is removed from
  // the first piece (as sentencepiece, llama.cpp and llama2.c do).
  virtual std::string decode(std::span<const int32_t> ids, bool special = false) const;
  // Streaming decode for generation: the text of `id` when it follows `prev` (-1 at the start).
  // llama2.c semantics: after BOS a piece's leading space is dropped.
  virtual std::string decodeNext(int32_t prev, int32_t id) const;

  const Vocabulary& vocab() const { return vocab_; }
  int32_t vocabSize() const { return vocab_.size(); }
  int32_t bos() const { return vocab_.bos; }
  int32_t eos() const { return vocab_.eos; }
  bool addsBosByDefault() const { return addBosDefault_; }
  // The id an evaluation window (perplexity) or an empty prompt starts with: BOS when the
  // tokenizer adds it; for a vocabulary without BOS (GPT-2) end-of-text; none (-1) when the
  // tokenizer has a BOS but its files say not to add it (add_bos_token = false: SmolLM2).
  int32_t sequenceStart() const {
    if (addBosDefault_ && vocab_.bos >= 0) return vocab_.bos;
    return vocab_.bos < 0 ? vocab_.eos : -1;
  }
  // The ids that end generation (Vocabulary::stopIds, eos included).
  std::vector<int32_t> stopIds() const;

 protected:
  explicit Tokenizer(Vocabulary v) : vocab_(std::move(v)) { vocab_.buildIndex(); }
  // Splits text at special tokens: fragments of raw text, and token ids. Control tokens count
  // only with parseSpecial; user-defined ones always.
  struct Fragment {
    std::string_view text;  // raw text (when id < 0)
    int32_t id = -1;
  };
  std::vector<Fragment> splitSpecial(std::string_view text, bool parseSpecial) const;
  bool stripsLeadingSpace_ = false;  // decode drops the first piece's leading space
  bool addBosDefault_ = false;       // what the model file asks for (tokenizer.ggml.add_bos_token)

  Vocabulary vocab_;
  std::vector<int32_t> specials_;
  friend void setAddsBos(Tokenizer& t, bool add);  // control / user-defined ids, longest text first
};

// Overrides what the tokenizer file says about BOS (tokenizer_config.json's add_bos_token).
void setAddsBos(Tokenizer& t, bool add);
// The most text bytes `tokens` tokens can cover: every token stands for at most as many text
// bytes as its vocabulary entry has (SentencePiece's "▁" is 3 bytes for one space, GPT-2's mapped
// bytes 1–2 bytes each), plus a margin of 64 tokens for the word the cut falls in. 0 when
// `tokens` is 0 (no cap: the whole text). The budget for readTextFile (core/io/regular_file.h).
uint64_t textBytesForTokens(const Tokenizer& tok, int64_t tokens);

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for continuation or invalid
// bytes, so that arbitrary bytes always make progress).
inline size_t utf8Length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace qs

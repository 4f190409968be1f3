// The tokenizer.ggml.* entries of a GGUF export from a non-GGUF source (docs/export.md, "GGUF
// vocabulary"). llama.cpp refuses a model file without them ("key not found in model:
// tokenizer.ggml.model"), so an export that cannot carry one is refused, never written bare.
//
//   SentencePiece (llama2.c tokenizer.bin, tok512.bin)  → model "llama": tokens, scores, types
//   Hugging Face byte-level BPE (tokenizer.json)        → model "gpt2": tokens, types, merges and
//                                                         the pre-tokenizer's llama.cpp name
//   a GGUF file given as the tokenizer                  → its tokenizer.ggml.* entries, copied
// The vocabulary is padded to the embedding's rows with unused "[PAD<i>]" tokens, as
// convert_hf_to_gguf.py does (llama.cpp sizes the vocabulary by the token list).
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "core/export/export_internal.h"
#include "core/io/regular_file.h"
#include "core/model/gguf_reader.h"
#include "core/model/model_file.h"
#include "core/tokenizer/tokenizer_loaders.h"
#include "kernels/common/error.h"

namespace fs = std::filesystem;

namespace qs::exportdetail {
namespace {

// llama.cpp's name (tokenizer.ggml.pre, llama-vocab.cpp) for the pre-tokenizer of a
// tokenizer.json: the regex list it splits with, the way our loader builds it. Empty when
// llama.cpp has no pre-tokenizer of that name we can vouch for.
std::string preTokenizerName(const nlohmann::json& pre, std::string* why) {
  std::vector<std::string> regexes;
  bool ok = true;
  std::function<void(const nlohmann::json&)> add = [&](const nlohmann::json& p) {
    const std::string t = p.is_object() ? p.value("type", std::string()) : std::string();
    if (t == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
      for (const auto& q : p["pretokenizers"]) add(q);
    } else if (t == "ByteLevel") {
      if (p.value("use_regex", true)) regexes.push_back(kGpt2SplitRegex);
      if (p.value("add_prefix_space", false)) ok = false, *why = "ByteLevel add_prefix_space has no llama.cpp pre-tokenizer";
    } else if (t == "Split" && p.contains("pattern") && p["pattern"].is_object() && p["pattern"].contains("Regex") &&
               p["pattern"]["Regex"].is_string()) {
      regexes.push_back(p["pattern"]["Regex"].get<std::string>());
    } else if (t == "Digits") {
      regexes.push_back(p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    } else {
      ok = false;
      *why = "pre-tokenizer step \"" + t + "\" has no llama.cpp equivalent";
    }
  };
  add(pre);
  if (!ok) return {};
  using V = std::vector<std::string>;
  if (regexes == V{kGpt2SplitRegex}) return "gpt-2";
  if (regexes == V{kLlama3SplitRegex}) return "llama-bpe";
  if (regexes == V{kQwen2SplitRegex}) return "qwen2";
  if (regexes == V{R"(\p{N})", kGpt2SplitRegex}) return "smollm";
  *why = "its split pattern is not one of llama.cpp's pre-tokenizers we write (gpt-2, llama-bpe, qwen2, smollm)";
  return {};
}

std::vector<MetaEntry> specialIds(const Vocabulary& v, bool addBos) {
  std::vector<MetaEntry> m;
  if (v.bos >= 0) m.push_back({"tokenizer.ggml.bos_token_id", "u32", uint64_t(v.bos)});
  if (v.eos >= 0) m.push_back({"tokenizer.ggml.eos_token_id", "u32", uint64_t(v.eos)});
  if (v.unk >= 0) m.push_back({"tokenizer.ggml.unknown_token_id", "u32", uint64_t(v.unk)});
  if (v.pad >= 0) m.push_back({"tokenizer.ggml.padding_token_id", "u32", uint64_t(v.pad)});
  m.push_back({"tokenizer.ggml.add_bos_token", "bool", addBos});
  m.push_back({"tokenizer.ggml.add_eos_token", "bool", false});
  return m;
}

// tokens and types padded to `rows` entries (llama.cpp: n_vocab = number of tokens).
void padVocabulary(nlohmann::json& tokens, nlohmann::json& types, int64_t rows) {
  for (int64_t i = int64_t(tokens.size()); i < rows; ++i) {
    tokens.push_back("[PAD" + std::to_string(i) + "]");
    types.push_back(int(TokenType::Unused));
  }
}

GgufVocabulary spmVocabulary(const Tokenizer& tok, int64_t rows) {
  const Vocabulary& v = tok.vocab();
  // llama2.c's tokenizer files spell SentencePiece's word-start mark "▁" as a plain space;
  // GGUF vocabularies keep "▁", as llama.cpp's SPM tokenizer expects. Which spelling a
  // vocabulary uses shows in its tokens (whatever model file it came with).
  int64_t marks = 0, blanks = 0;
  for (const auto& t : v.tokens) {
    marks += t.find("\xE2\x96\x81") != std::string::npos;
    blanks += t.find(' ') != std::string::npos;
  }
  const bool spaceIsBlank = blanks > marks;
  nlohmann::json tokens = nlohmann::json::array(), scores = nlohmann::json::array(),
                 types = nlohmann::json::array();
  for (int32_t i = 0; i < v.size(); ++i) {
    std::string t = v.tokens[size_t(i)];
    const TokenType type = size_t(i) < v.types.size() ? v.types[size_t(i)] : TokenType::Normal;
    if (type == TokenType::Control) {
      // llama2.c's files spell BOS / EOS "\n<s>\n" / "\n</s>\n"; llama.cpp prints control
      // tokens by their text, as "<s>" in every other GGUF.
      const size_t b = t.find_first_not_of(" \n"), e = t.find_last_not_of(" \n");
      if (b != std::string::npos) t = t.substr(b, e - b + 1);
    } else if (spaceIsBlank && type != TokenType::Byte) {
      std::string u;
      for (char c : t) u += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
      t = std::move(u);
    }
    tokens.push_back(t);
    scores.push_back(size_t(i) < v.scores.size() ? double(v.scores[size_t(i)]) : 0.0);
    types.push_back(size_t(i) < v.types.size() ? int(v.types[size_t(i)]) : int(TokenType::Normal));
  }
  padVocabulary(tokens, types, rows);
  while (scores.size() < tokens.size()) scores.push_back(0.0);
  GgufVocabulary g;
  g.summary = "SentencePiece vocabulary (" + std::to_string(v.size()) + " tokens) as tokenizer.ggml.model \"llama\"";
  g.meta.push_back({"tokenizer.ggml.model", "string", "llama"});
  g.meta.push_back({"tokenizer.ggml.tokens", "array[string]", tokens});
  g.meta.push_back({"tokenizer.ggml.scores", "array[f32]", scores});
  g.meta.push_back({"tokenizer.ggml.token_type", "array[i32]", types});
  auto ids = specialIds(v, true);
  g.meta.insert(g.meta.end(), ids.begin(), ids.end());
  return g;
}

GgufVocabulary bpeVocabulary(const Tokenizer& tok, const std::string& file, int64_t rows) {
  GgufVocabulary g;
  std::string text;
  try {
    text = readRegularFile(file, "tokenizer", uint64_t(256) << 20);
  } catch (const Error& e) {
    g.refusal = "the byte-level BPE tokenizer's file " + file + " cannot be read again for its merges: " + e.what();
    return g;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    g.refusal = file + ": the tokenizer is not a tokenizer.json (its merges cannot be carried into GGUF)";
    return g;
  }
  const auto model = j.find("model");
  if (model == j.end() || !model->is_object() || model->value("type", std::string()) != "BPE") {
    g.refusal = file + ": model.type is not BPE";
    return g;
  }
  if (model->value("byte_fallback", false)) {
    g.refusal = file + ": a BPE with byte_fallback (SentencePiece-style) is not a GPT-2 byte-level vocabulary";
    return g;
  }
  std::string why;
  const std::string pre = j.contains("pre_tokenizer") ? preTokenizerName(j["pre_tokenizer"], &why) : std::string();
  if (pre.empty()) {
    g.refusal = file + ": pre_tokenizer: " + (why.empty() ? std::string("missing") : why) +
                " — llama.cpp would split the text differently";
    return g;
  }
  nlohmann::json merges = nlohmann::json::array();
  if (auto m = model->find("merges"); m != model->end() && m->is_array())
    for (const auto& x : *m) {
      if (x.is_string()) merges.push_back(x);
      else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string())
        merges.push_back(x[0].get<std::string>() + " " + x[1].get<std::string>());
      else {
        g.refusal = file + ": model.merges holds an entry that is not a merge";
        return g;
      }
    }
  const Vocabulary& v = tok.vocab();
  nlohmann::json tokens = nlohmann::json::array(), types = nlohmann::json::array();
  for (int32_t i = 0; i < v.size(); ++i) {
    const std::string& t = v.tokens[size_t(i)];
    tokens.push_back(t.empty() ? "[PAD" + std::to_string(i) + "]" : t);  // ids the file leaves out
    types.push_back(size_t(i) < v.types.size() ? int(v.types[size_t(i)]) : int(TokenType::Normal));
  }
  padVocabulary(tokens, types, rows);
  g.summary = "byte-level BPE vocabulary (" + std::to_string(v.size()) + " tokens, " +
              std::to_string(merges.size()) + " merges) as tokenizer.ggml.model \"gpt2\", pre-tokenizer \"" + pre + "\"";
  g.meta.push_back({"tokenizer.ggml.model", "string", "gpt2"});
  g.meta.push_back({"tokenizer.ggml.pre", "string", pre});
  g.meta.push_back({"tokenizer.ggml.tokens", "array[string]", tokens});
  g.meta.push_back({"tokenizer.ggml.token_type", "array[i32]", types});
  g.meta.push_back({"tokenizer.ggml.merges", "array[string]", merges});
  auto ids = specialIds(v, tok.addsBosByDefault());
  g.meta.insert(g.meta.end(), ids.begin(), ids.end());
  return g;
}

// The tokenizer's own file: the one the caller named, else tokenizer.json beside the model.
std::string tokenizerFileOf(const ExportSource& src) {
  if (!src.tokenizerFile.empty()) {
    std::error_code ec;
    if (fs::is_directory(src.tokenizerFile, ec)) return (fs::path(src.tokenizerFile) / "tokenizer.json").string();
    return src.tokenizerFile;
  }
  const fs::path p(src.file.path());
  std::error_code ec;
  const fs::path beside = (fs::is_directory(p, ec) ? p : p.parent_path()) / "tokenizer.json";
  return fs::exists(beside, ec) ? beside.string() : std::string();
}

}  // namespace

GgufVocabulary ggufVocabulary(const ExportSource& src) {
  GgufVocabulary g;
  const int64_t rows = src.graph.tokenEmbedding.rows > 0 ? src.graph.tokenEmbedding.rows : src.file.config().vocabSize;
  if (!src.tokenizer) {
    g.refusal = "the source has no tokenizer, and llama.cpp refuses a GGUF without one (key tokenizer.ggml.model): "
                "give the model's tokenizer (--tokenizer FILE)";
    return g;
  }
  if (src.tokenizer->vocabSize() > rows) {
    g.refusal = "the tokenizer has " + std::to_string(src.tokenizer->vocabSize()) + " tokens, the embedding " +
                std::to_string(rows) + " rows";
    return g;
  }
  const std::string file = tokenizerFileOf(src);
  if (!file.empty()) {  // a GGUF named as the tokenizer: its entries as they are
    std::ifstream f(file, std::ios::binary);
    char magic[4] = {};
    if (f.read(magic, 4) && std::string(magic, 4) == "GGUF") {
      const auto tf = openGguf(file);
      for (const auto& e : tf->metadata())
        if (e.key.rfind("tokenizer.", 0) == 0) g.meta.push_back(e);
      g.summary = "tokenizer.* entries copied from " + file;
      if (g.meta.empty()) g.refusal = file + " has no tokenizer.ggml.* entries";
      return g;
    }
  }
  const std::string kind(src.tokenizer->kindName());
  if (kind == "sentencepiece-bpe") return spmVocabulary(*src.tokenizer, rows);
  if (kind == "byte-level-bpe") {
    if (file.empty()) {
      g.refusal = "the byte-level BPE tokenizer's merges are in no file we can find (no tokenizer.json beside the model)";
      return g;
    }
    return bpeVocabulary(*src.tokenizer, file, rows);
  }
  g.refusal = "the source's " + kind + " tokenizer has no GGUF form llama.cpp accepts";
  return g;
}

}  // namespace qs::exportdetail

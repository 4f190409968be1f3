#include "core/tokenizer/tokenizer_loaders.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/io/json_guard.h"
#include "core/io/mapped_file.h"
#include "core/model/gguf_reader.h"
#include "core/model/model_file.h"
#include "kernels/common/error.h"

namespace qs {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxVocab = int64_t(1) << 22;
constexpr int32_t kMaxTokenBytes = 1 << 16;

TokenType typeFromInt(const std::string& file, int64_t id, int64_t v) {
  if (v < 0 || v > 6)
    throwBadInput(file, "tokenizer.ggml.token_type",
                  "token " + std::to_string(id) + " has type " + std::to_string(v) + " (0 to 6)");
  return TokenType(v);
}

void checkSpecialId(const std::string& file, const char* field, int32_t id, int32_t size) {
  if (id >= size || id < -1)
    throwBadInput(file, field,
                  "token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(size));
}

}  // namespace

std::unique_ptr<SpmTokenizer> loadLlama2cTokenizer(const std::string& path, int32_t vocabSize,
                                                   SpmEncodeMode mode) {
  MappedFile f(path, "tokenizer file");
  ByteReader r(f.bytes(), path);
  const int32_t maxLen = r.read<int32_t>("max_token_length");
  if (maxLen < 1 || maxLen > kMaxTokenBytes)
    throwBadInput(path, "max_token_length", "value " + std::to_string(maxLen) + " is outside [1, 65536]");
  if (vocabSize > kMaxVocab)
    throwBadInput(path, "vocab_size", std::to_string(vocabSize) + " tokens exceed the limit");
  Vocabulary v;
  // Each entry takes at least 8 bytes: a vocabulary size the file cannot hold fails here.
  if (vocabSize >= 0 && uint64_t(vocabSize) > r.remaining() / 8)
    throwBadInput(path, "tokens",
                  "the model's vocabulary of " + std::to_string(vocabSize) +
                      " tokens cannot fit in the " + std::to_string(r.remaining()) + " bytes left");
  for (int64_t i = 0; vocabSize < 0 ? r.remaining() > 0 : i < vocabSize; ++i) {
    if (i >= kMaxVocab) throwBadInput(path, "tokens", "more than 2^22 tokens");
    const std::string field = "token[" + std::to_string(i) + "]";
    const float score = r.read<float>(field.c_str());
    const int32_t len = r.read<int32_t>(field.c_str());
    if (len < 0 || len > maxLen)
      throwBadInput(path, field, "length " + std::to_string(len) + " is outside [0, max_token_length " +
                                     std::to_string(maxLen) + "]");
    auto b = r.readBytes(uint64_t(len), field.c_str());
    if (!std::isfinite(score)) throwBadInput(path, field, "score is not finite");
    v.tokens.emplace_back(reinterpret_cast<const char*>(b.data()), size_t(len));
    v.scores.push_back(score);
  }
  if (v.tokens.size() < 3) throwBadInput(path, "tokens", "fewer than 3 tokens (unk, bos, eos)");
  // run.c's conventions: 0 <unk>, 1 BOS, 2 EOS; byte tokens "<0xXX>".
  v.types.assign(v.tokens.size(), TokenType::Normal);
  v.types[0] = TokenType::Unknown;
  v.types[1] = TokenType::Control;
  v.types[2] = TokenType::Control;
  for (size_t i = 3; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') v.types[i] = TokenType::Byte;
  }
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  SpmOptions o;
  o.spaceSymbol = " ";  // llama2.c's export replaced "▁" with a space
  o.mode = mode;
  o.addBos = true;
  return std::make_unique<SpmTokenizer>(std::move(v), o);
}

std::unique_ptr<Tokenizer> tokenizerFromGguf(const ModelFile& m) {
  const std::string& file = m.path();
  auto meta = [&](const char* key) { return m.findMeta(key); };
  const MetaEntry* model = meta("tokenizer.ggml.model");
  if (!model) throwBadInput(file, "tokenizer.ggml.model", "missing: the file has no tokenizer");
  if (!model->value.is_string()) throwBadInput(file, "tokenizer.ggml.model", "must be a string");
  const std::string kind = model->value.get<std::string>();
  if (kind != "llama" && kind != "gpt2")
    throw Error(ErrorKind::Unsupported,
                "tokenizer model \"" + kind + "\" is not supported (llama, gpt2)", file,
                "tokenizer.ggml.model");

  const MetaEntry* tokens = meta("tokenizer.ggml.tokens");
  if (!tokens || !tokens->value.is_array() || tokens->value.empty())
    throwBadInput(file, "tokenizer.ggml.tokens", "missing or not an array of strings");
  Vocabulary v;
  const size_t n = tokens->value.size();
  if (int64_t(n) > kMaxVocab)
    throwBadInput(file, "tokenizer.ggml.tokens", std::to_string(n) + " tokens exceed the limit of 2^22");
  v.tokens.reserve(n);
  for (const auto& t : tokens->value) {
    if (!t.is_string()) throwBadInput(file, "tokenizer.ggml.tokens", "holds a non-string entry");
    v.tokens.push_back(t.get<std::string>());
  }
  if (const MetaEntry* s = meta("tokenizer.ggml.scores")) {
    if (!s->value.is_array() || s->value.size() != n)
      throwBadInput(file, "tokenizer.ggml.scores",
                    "has " + std::to_string(s->value.is_array() ? s->value.size() : 0) +
                        " entries for " + std::to_string(n) + " tokens");
    v.scores.reserve(n);
    for (const auto& x : s->value) {
      if (!x.is_number()) throwBadInput(file, "tokenizer.ggml.scores", "holds a non-number");
      v.scores.push_back(x.get<float>());
    }
  }
  v.types.assign(n, TokenType::Normal);
  if (const MetaEntry* tt = meta("tokenizer.ggml.token_type")) {
    if (!tt->value.is_array() || tt->value.size() != n)
      throwBadInput(file, "tokenizer.ggml.token_type", "length differs from tokenizer.ggml.tokens");
    for (size_t i = 0; i < n; ++i) {
      if (!tt->value[i].is_number_integer())
        throwBadInput(file, "tokenizer.ggml.token_type", "holds a non-integer");
      v.types[i] = typeFromInt(file, int64_t(i), tt->value[i].get<int64_t>());
    }
  }
  auto id = [&](const char* key, int32_t dflt) -> int32_t {
    const MetaEntry* e = meta(key);
    if (!e) return dflt;
    if (!e->value.is_number_integer()) throwBadInput(file, key, "must be an integer");
    const int64_t x = e->value.get<int64_t>();
    if (x < -1 || x >= int64_t(n))
      throwBadInput(file, key, "token id " + std::to_string(x) + " is outside the vocabulary of " +
                                   std::to_string(n));
    return int32_t(x);
  };
  auto flag = [&](const char* key, bool dflt) {
    const MetaEntry* e = meta(key);
    if (!e) return dflt;
    if (!e->value.is_boolean()) throwBadInput(file, key, "must be a bool");
    return e->value.get<bool>();
  };
  const bool spm = kind == "llama";
  v.bos = id("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  v.eos = id("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  v.unk = id("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  v.pad = id("tokenizer.ggml.padding_token_id", -1);
  checkSpecialId(file, "tokenizer.ggml.bos_token_id", v.bos, int32_t(n));
  // End of generation: eos, and the end-of-turn / end-of-message ids llama.cpp also stops at.
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int32_t s = id(key, -1);
    if (s >= 0 && s < int32_t(n)) v.stopIds.push_back(s);
  }

  if (spm) {
    SpmOptions o;
    o.addSpacePrefix = flag("tokenizer.ggml.add_space_prefix", true);
    o.addBos = flag("tokenizer.ggml.add_bos_token", true);
    return std::make_unique<SpmTokenizer>(std::move(v), o);
  }
  const MetaEntry* merges = meta("tokenizer.ggml.merges");
  if (!merges || !merges->value.is_array())
    throwBadInput(file, "tokenizer.ggml.merges", "missing: a gpt2 tokenizer needs its merges");
  std::vector<std::string> ms;
  ms.reserve(merges->value.size());
  for (const auto& x : merges->value) {
    if (!x.is_string()) throwBadInput(file, "tokenizer.ggml.merges", "holds a non-string");
    ms.push_back(x.get<std::string>());
  }
  BpeOptions o;
  o.addBos = flag("tokenizer.ggml.add_bos_token", false);
  std::string pre = "default";
  if (const MetaEntry* p = meta("tokenizer.ggml.pre"); p && p->value.is_string())
    pre = p->value.get<std::string>();
  // llama.cpp's pre-tokenizer names (llama-vocab.cpp) for the models we run.
  if (pre == "gpt-2" || pre == "gpt2" || pre == "default") {
    o.splitRegexes = {kGpt2SplitRegex};
  } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe") {
    o.splitRegexes = {kLlama3SplitRegex};
  } else if (pre == "qwen2") {
    o.splitRegexes = {kQwen2SplitRegex};
  } else if (pre == "smollm" || pre == "starcoder") {
    o.splitRegexes = {R"(\p{N})", kGpt2SplitRegex};
  } else {
    throw Error(ErrorKind::Unsupported,
                "pre-tokenizer \"" + pre + "\" is not supported (gpt-2, llama-bpe, qwen2, smollm)",
                file, "tokenizer.ggml.pre");
  }
  return std::make_unique<BpeTokenizer>(std::move(v), ms, o, file);
}

std::unique_ptr<BpeTokenizer> loadHfTokenizerJson(const std::string& path) {
  MappedFile f(path, "tokenizer file");
  if (f.size() > (uint64_t(256) << 20))
    throwBadInput(path, "", "tokenizer.json of " + std::to_string(f.size()) + " bytes is implausibly large");
  const auto bytes = f.bytes();
  // A 256k-token tokenizer.json holds ~1.5M values: allow twice that.
  const nlohmann::json j = parseJsonGuarded(
      path, "", std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), kMaxJsonDepth,
      uint64_t(1) << 22);
  if (!j.is_object()) throwBadInput(path, "", "must be a JSON object");
  auto model = j.find("model");
  if (model == j.end() || !model->is_object()) throwBadInput(path, "model", "missing");
  const std::string type = model->value("type", std::string());
  if (type != "BPE")
    throw Error(ErrorKind::Unsupported, "tokenizer model \"" + type + "\" is not supported (BPE)",
                path, "model.type");
  auto vocab = model->find("vocab");
  if (vocab == model->end() || !vocab->is_object() || vocab->empty())
    throwBadInput(path, "model.vocab", "missing or empty");
  int64_t maxId = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= kMaxVocab)
      throwBadInput(path, "model.vocab", "\"" + it.key() + "\" has id " + it->dump());
    maxId = std::max(maxId, it->get<int64_t>());
  }
  auto added = j.find("added_tokens");
  if (added != j.end() && !added->is_array()) throwBadInput(path, "added_tokens", "must be an array");
  if (added != j.end())
    for (size_t k = 0; k < added->size(); ++k) {
      const auto& a = (*added)[k];
      const std::string field = "added_tokens[" + std::to_string(k) + "]";
      if (!a.is_object() || !a.contains("id") || !a.contains("content") || !a["content"].is_string() ||
          !a["id"].is_number_integer())
        throwBadInput(path, field, "entry " + a.dump().substr(0, 80) + " needs an integer id and a string content");
      // Checked before the vocabulary is sized: an id of 10^8 would size it (or write past it).
      const int64_t id = a["id"].is_number_unsigned() ? int64_t(std::min<uint64_t>(a["id"].get<uint64_t>(), INT64_MAX))
                                                      : a["id"].get<int64_t>();
      if (id < 0 || id >= kMaxVocab)
        throwBadInput(path, field + ".id", "token id " + std::to_string(id) + " is outside [0, 2^22)");
      maxId = std::max(maxId, id);
    }
  Vocabulary v;
  v.tokens.assign(size_t(maxId + 1), std::string());
  v.types.assign(size_t(maxId + 1), TokenType::Unused);
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    const auto i = size_t(it->get<int64_t>());
    v.tokens[i] = it.key();
    v.types[i] = TokenType::Normal;
  }
  if (added != j.end()) {
    for (const auto& a : *added) {
      const auto i = size_t(a["id"].get<int64_t>());  // checked above
      v.tokens[i] = a["content"].get<std::string>();
      v.types[i] = a.value("special", false) ? TokenType::Control : TokenType::UserDefined;
    }
  }
  std::vector<std::string> merges;
  if (auto m = model->find("merges"); m != model->end() && m->is_array()) {
    merges.reserve(m->size());
    for (const auto& x : *m) {
      if (x.is_string())
        merges.push_back(x.get<std::string>());
      else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string())
        merges.push_back(x[0].get<std::string>() + " " + x[1].get<std::string>());  // newer format
      else
        throwBadInput(path, "model.merges", "entry " + x.dump().substr(0, 80) + " is not a merge");
    }
  }
  // Model fields that change the result: refused unless we implement them.
  BpeOptions o;
  o.splitRegexes.clear();
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    if (auto f = model->find(key); f != model->end() && !f->is_null() && !(f->is_string() && f->get<std::string>().empty()))
      throw Error(ErrorKind::Unsupported, std::string("BPE ") + key + " " + f->dump().substr(0, 40) + " is not supported",
                  path, std::string("model.") + key);
  auto boolField = [&](const char* key) {
    auto f = model->find(key);
    if (f == model->end() || f->is_null()) return false;
    if (!f->is_boolean()) throwBadInput(path, std::string("model.") + key, "must be true or false");
    return f->get<bool>();
  };
  o.byteFallback = boolField("byte_fallback");
  o.fuseUnk = boolField("fuse_unk");
  o.ignoreMerges = boolField("ignore_merges");
  // Normalizer: Prepend, Replace (literal strings) and NFC, alone or in a Sequence.
  std::function<void(const nlohmann::json&)> addNorm = [&](const nlohmann::json& n) {
    if (n.is_null()) return;
    const std::string t = n.is_object() ? n.value("type", std::string()) : std::string();
    if (t == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
      for (const auto& q : n["normalizers"]) addNorm(q);
    } else if (t == "Prepend" && n.contains("prepend") && n["prepend"].is_string()) {
      o.normalizer.push_back({NormalizerStep::Prepend, n["prepend"].get<std::string>(), {}});
    } else if (t == "Replace" && n.contains("pattern") && n["pattern"].is_object() && n["pattern"].contains("String") &&
               n["pattern"]["String"].is_string() && n.contains("content") && n["content"].is_string()) {
      o.normalizer.push_back({NormalizerStep::Replace, n["pattern"]["String"].get<std::string>(), n["content"].get<std::string>()});
    } else if (t == "NFC") {
      o.normalizer.push_back({NormalizerStep::Nfc, {}, {}});
    } else {
      throw Error(ErrorKind::Unsupported, "normalizer " + n.dump().substr(0, 80) + " is not supported (Prepend, Replace, NFC)",
                  path, "normalizer");
    }
  };
  if (auto n = j.find("normalizer"); n != j.end()) addNorm(*n);
  // Pre-tokenizer: ByteLevel (GPT-2 regex when use_regex), optionally in a Sequence after
  // Split(Regex, Isolated) and Digits(individual_digits); or Metaspace (SentencePiece-style),
  // or none after a Prepend/Replace normalizer (how transformers 4 wrote Llama 2).
  std::function<void(const nlohmann::json&)> addPre = [&](const nlohmann::json& p) {
    const std::string t = p.value("type", std::string());
    if (t == "Sequence") {
      auto seq = p.find("pretokenizers");
      if (seq == p.end() || !seq->is_array()) throwBadInput(path, "pre_tokenizer", "Sequence without pretokenizers");
      for (const auto& q : *seq) addPre(q);
    } else if (t == "ByteLevel") {
      if (p.value("use_regex", true)) o.splitRegexes.push_back(kGpt2SplitRegex);
      o.addPrefixSpace = p.value("add_prefix_space", false);
    } else if (t == "Split") {
      const auto pat = p.find("pattern");
      if (pat == p.end() || !pat->is_object() || !pat->contains("Regex") || !(*pat)["Regex"].is_string())
        throw Error(ErrorKind::Unsupported, "Split pre-tokenizer without a Regex pattern", path, "pre_tokenizer");
      if (p.value("behavior", std::string("Isolated")) != "Isolated")
        throw Error(ErrorKind::Unsupported, "Split behavior other than Isolated", path, "pre_tokenizer");
      o.splitRegexes.push_back((*pat)["Regex"].get<std::string>());
    } else if (t == "Metaspace") {
      o.byteLevel = false;
      o.metaspace = p.value("replacement", std::string("\xE2\x96\x81"));
      if (o.metaspace.empty()) throwBadInput(path, "pre_tokenizer.replacement", "is empty");
      o.metaspaceSplit = p.value("split", true);
      std::string scheme = p.value("prepend_scheme", std::string());
      if (scheme.empty()) scheme = p.value("add_prefix_space", true) ? "always" : "never";  // older files
      if (scheme == "always")
        o.prepend = BpeOptions::Prepend::Always;
      else if (scheme == "first")
        o.prepend = BpeOptions::Prepend::First;
      else if (scheme == "never")
        o.prepend = BpeOptions::Prepend::Never;
      else
        throw Error(ErrorKind::Unsupported, "Metaspace prepend_scheme \"" + scheme + "\" is not supported", path,
                    "pre_tokenizer.prepend_scheme");
    } else if (t == "Digits") {
      o.splitRegexes.push_back(p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
    } else {
      throw Error(ErrorKind::Unsupported, "pre-tokenizer \"" + t + "\" is not supported", path, "pre_tokenizer");
    }
  };
  auto pre = j.find("pre_tokenizer");
  const bool spaceNormalizer = std::any_of(o.normalizer.begin(), o.normalizer.end(), [](const NormalizerStep& st) {
    return st.kind == NormalizerStep::Replace && st.a == " ";
  });
  if ((pre == j.end() || pre->is_null()) && spaceNormalizer) {
    o.byteLevel = false;  // transformers 4's Llama 2 layout: the normalizer did the Metaspace work
  } else {
    if (pre == j.end() || !pre->is_object())
      throw Error(ErrorKind::Unsupported, "a BPE tokenizer without a ByteLevel or Metaspace pre-tokenizer", path,
                  "pre_tokenizer");
    addPre(*pre);
  }
  if (!o.byteLevel && !o.splitRegexes.empty())
    throw Error(ErrorKind::Unsupported, "Metaspace mixed with ByteLevel / Split / Digits pre-tokenizers", path,
                "pre_tokenizer");
  if (!o.byteLevel) {
    if (auto u = model->find("unk_token"); u != model->end() && u->is_string()) {
      for (size_t i = 0; i < v.tokens.size(); ++i)
        if (v.tokens[i] == u->get<std::string>()) v.unk = int32_t(i);
      if (v.unk < 0) throwBadInput(path, "model.unk_token", "\"" + u->get<std::string>() + "\" is not in the vocabulary");
    }
    // decoder Strip(" ", start ≥ 1): decode drops the leading space the prefix added.
    std::function<void(const nlohmann::json&)> findStrip = [&](const nlohmann::json& d) {
      if (!d.is_object()) return;
      if (d.value("type", std::string()) == "Sequence" && d.contains("decoders") && d["decoders"].is_array())
        for (const auto& q : d["decoders"]) findStrip(q);
      if (d.value("type", std::string()) == "Strip" && d.value("start", 0) >= 1) o.stripLeadingSpace = true;
    };
    if (auto d = j.find("decoder"); d != j.end()) findStrip(*d);
  }
  // BOS: the first special token of the post-processor's single-sequence template (Llama 3
  // wraps the TemplateProcessing in a Sequence after ByteLevel).
  std::function<void(const nlohmann::json&)> findBos = [&](const nlohmann::json& pp) {
    if (!pp.is_object()) return;
    if (pp.value("type", std::string()) == "Sequence") {
      if (auto ps = pp.find("processors"); ps != pp.end() && ps->is_array())
        for (const auto& q : *ps) findBos(q);
      return;
    }
    if (auto single = pp.find("single"); single != pp.end() && single->is_array() && !single->empty()) {
      const auto& first = (*single)[0];
      if (first.is_object() && first.contains("SpecialToken") && first["SpecialToken"].is_object()) {
        const std::string id = first["SpecialToken"].value("id", std::string());
        for (size_t i = 0; i < v.tokens.size(); ++i)
          if (v.tokens[i] == id) v.bos = int32_t(i);
        o.addBos = v.bos >= 0;
      }
    }
  };
  if (auto pp = j.find("post_processor"); pp != j.end()) findBos(*pp);
  // tokenizer_config.json beside it: bos_token names BOS, add_bos_token says whether to add it
  // (it overrides the post-processor, as transformers' tokenizers do when it is given).
  const fs::path dir = fs::path(path).parent_path();
  auto readJson = [&](const fs::path& p) -> nlohmann::json {
    std::error_code ec;
    if (!fs::is_regular_file(p, ec) || fs::file_size(p, ec) > (16u << 20)) return nullptr;
    std::ifstream f(p, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    return parseJsonGuarded(p.string(), p.filename().string(), ss.str());
  };
  auto tokenId = [&](const nlohmann::json& t) -> int32_t {  // "<s>" or {"content": "<s>"}
    const std::string s = t.is_string() ? t.get<std::string>()
                          : t.is_object() && t.contains("content") && t["content"].is_string() ? t["content"].get<std::string>()
                                                                                                 : std::string();
    if (s.empty()) return -1;
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.tokens[i] == s) return int32_t(i);
    return -1;
  };
  if (const nlohmann::json tc = readJson(dir / "tokenizer_config.json"); tc.is_object()) {
    if (auto b = tc.find("bos_token"); b != tc.end() && tokenId(*b) >= 0) v.bos = tokenId(*b);
    if (auto e = tc.find("eos_token"); e != tc.end() && tokenId(*e) >= 0) v.eos = tokenId(*e);
    if (auto a = tc.find("add_bos_token"); a != tc.end() && a->is_boolean()) o.addBos = a->get<bool>() && v.bos >= 0;
  }
  // eos_token_id of generation_config.json / config.json: an id or a list of ids.
  for (const char* name : {"generation_config.json", "config.json"}) {
    const nlohmann::json c = readJson(dir / name);
    if (!c.is_object()) continue;
    auto e = c.find("eos_token_id");
    if (e == c.end()) continue;
    for (const auto& x : e->is_array() ? *e : nlohmann::json::array({*e}))
      if (x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < int64_t(v.tokens.size()))
        v.stopIds.push_back(int32_t(x.get<int64_t>()));
  }
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (v.tokens[i] == "<|endoftext|>" || v.tokens[i] == "<|end_of_text|>" || v.tokens[i] == "</s>")
      v.eos = int32_t(i);
  return std::make_unique<BpeTokenizer>(std::move(v), merges, o, path);
}

std::unique_ptr<Tokenizer> openTokenizer(const std::string& path, int32_t vocabSize) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "tokenizer.json", ec))
      return loadHfTokenizerJson((fs::path(path) / "tokenizer.json").string());
    if (fs::exists(fs::path(path) / "tokenizer.model", ec))
      return loadSentencePieceModel((fs::path(path) / "tokenizer.model").string());
    throwBadInput(path, "", "is a directory without tokenizer.json or tokenizer.model");
  }
  MappedFile probe(path, "tokenizer file");
  const auto head = probe.bytes().first(size_t(std::min<uint64_t>(probe.size(), 16)));
  if (looksLikeGguf(head)) {
    auto m = openModel(path);
    return tokenizerFromGguf(*m);
  }
  size_t i = 0;
  while (i < head.size() && std::isspace(int(head[i]))) ++i;
  if (i < head.size() && head[i] == std::byte('{')) return loadHfTokenizerJson(path);
  if (looksLikeSentencePieceModel(head)) return loadSentencePieceModel(path);
  return loadLlama2cTokenizer(path, vocabSize);
}

std::unique_ptr<Tokenizer> tokenizerForModel(const ModelFile& m) {
  if (m.format() == ModelFormat::Gguf) {
    if (!m.findMeta("tokenizer.ggml.model")) return nullptr;
    return tokenizerFromGguf(m);
  }
  if (m.format() == ModelFormat::Safetensors) {
    const fs::path p = fs::path(m.path());
    const fs::path dir = fs::is_directory(p) ? p : p.parent_path();
    std::error_code ec;
    if (fs::exists(dir / "tokenizer.json", ec)) return loadHfTokenizerJson((dir / "tokenizer.json").string());
    if (fs::exists(dir / "tokenizer.model", ec)) return loadSentencePieceModel((dir / "tokenizer.model").string());
  }
  return nullptr;
}

}  // namespace qs

#include "core/model/gguf_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "core/io/mapped_file.h"
#include "kernels/common/error.h"
#include "kernels/ggml/ggml_types.h"

namespace qs {

std::string_view ggufTypeName(uint32_t type) {
  static constexpr std::string_view kNames[] = {"u8",  "i8",   "u16",    "i16",   "u32",
                                                "i32", "f32",  "bool",   "string", "array",
                                                "u64", "i64",  "f64"};
  return type < std::size(kNames) ? kNames[type] : std::string_view{};
}

bool looksLikeGguf(std::span<const std::byte> head) {
  if (head.size() < 4) return false;
  uint32_t magic;
  std::memcpy(&magic, head.data(), 4);
  return magic == kGgufMagic;
}

namespace {

// Limits that exist only to turn absurd claims into clear errors. Each is far beyond any real
// file: llama.cpp itself allows 4 dimensions; the largest vocabularies have ~260k entries.
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxArrayElems = uint64_t(1) << 24;
constexpr int kMaxArrayDepth = 3;  // an array of arrays of arrays of scalars, at most
constexpr uint64_t kMaxAlignment = uint64_t(1) << 20;
// All metadata values together (array elements at every level): each costs 16 bytes or more
// once read (a string 48), so a 48 MB file of nested u8 arrays would become 1.4 GB. The largest
// real files (256k-token vocabularies: tokens, scores, types, merges) hold ~1.1M.
constexpr uint64_t kMaxMetaValues = uint64_t(1) << 22;

// Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF): what JSON output
// (inspect --json, the GUI's metadata view, GgufWriter's round trip through nlohmann) accepts.
// Returns the offset of the first invalid byte, or npos.
size_t invalidUtf8At(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    if (c < 0x80) { ++i; continue; }
    int n;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1Fu;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0Fu;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07u;
    else return i;
    if (i + size_t(n) >= s.size()) return i;  // the sequence runs past the end
    for (int k = 1; k <= n; ++k) {
      const auto b = uint8_t(s[i + size_t(k)]);
      if ((b & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (b & 0x3Fu);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += size_t(n) + 1;
  }
  return std::string_view::npos;
}

// An f32 as the double with the shortest decimal form that reads back as the same float
// (1e-05, not 9.999999747378752e-06): exact for a writer, readable for a person.
nlohmann::json f32ToJson(float v) {
  if (!std::isfinite(v)) return double(v);
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::strtod(std::string(buf, res.ptr).c_str(), nullptr);
}

class GgufFile final : public ModelFile {
 public:
  GgufFile(std::unique_ptr<MappedFile> file, uint32_t version)
      : file_(std::move(file)), version_(version) {
    path_ = file_->path();
    fileSize_ = file_->size();
  }
  ModelFormat format() const override { return ModelFormat::Gguf; }
  std::string formatDescription() const override {
    return "GGUF version " + std::to_string(version_);
  }
  std::span<const std::byte> tensorBytes(const TensorInfo& t) const override {
    return file_->bytes().subspan(size_t(t.offset), size_t(t.nbytes));
  }

  std::unique_ptr<MappedFile> file_;
  uint32_t version_;
  friend class GgufParser;
};

class GgufParser {
 public:
  GgufParser(GgufFile& m) : m_(m), r_(m.file_->bytes(), m.path_) {}

  void parse() {
    r_.skip(4, "header.magic");
    const uint32_t version = r_.read<uint32_t>("header.version");
    if (version < 2 || version > 3)
      throw Error(ErrorKind::Unsupported,
                  "GGUF version " + std::to_string(version) +
                      " is not supported (2 and 3; llama.cpp dropped version 1 too)",
                  m_.path_, "header.version");
    m_.version_ = version;
    // Version 1 stored counts and lengths as u32, later versions as u64.
    wide_ = version >= 2;
    const uint64_t nTensors = readCount("header.n_tensors");
    const uint64_t nKv = readCount("header.n_kv");
    // Smallest possible entries: a KV is a key length + a 1-char key + type + a 1-byte value;
    // a tensor info is name length + n_dims + type + offset.
    const uint64_t minKv = (wide_ ? 8 : 4) + 1 + 4 + 1;
    const uint64_t minTensor = (wide_ ? 8 : 4) + 4 + 4 + 8;
    if (nKv > r_.remaining() / minKv)
      throwBadInput(m_.path_, "header.n_kv",
                    "claims " + std::to_string(nKv) + " key-value pairs; the file has room for at most " +
                        std::to_string(r_.remaining() / minKv));
    if (nTensors > r_.remaining() / minTensor)
      throwBadInput(m_.path_, "header.n_tensors",
                    "claims " + std::to_string(nTensors) + " tensors; the file has room for at most " +
                        std::to_string(r_.remaining() / minTensor));

    std::unordered_set<std::string> keys;
    m_.metadata_.reserve(size_t(nKv));
    for (uint64_t i = 0; i < nKv; ++i) {
      const std::string field = "metadata[" + std::to_string(i) + "]";
      std::string key = readString((field + ".key").c_str());
      if (!keys.insert(key).second)
        throwBadInput(m_.path_, key, "duplicate metadata key");
      const uint32_t type = r_.read<uint32_t>((field + ".type").c_str());
      MetaEntry e;
      e.key = key;
      e.value = readValue(type, key, 0, e.type);
      m_.metadata_.push_back(std::move(e));
    }

    uint64_t alignment = kGgufDefaultAlignment;
    if (const MetaEntry* a = m_.findMeta("general.alignment")) {
      if (a->type != "u32" || !a->value.is_number_unsigned())
        throwBadInput(m_.path_, "general.alignment",
                      "must be a u32, is a " + a->type);
      alignment = a->value.get<uint64_t>();
      if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > kMaxAlignment)
        throwBadInput(m_.path_, "general.alignment",
                      "must be a power of two up to " + std::to_string(kMaxAlignment) + ", is " +
                          std::to_string(alignment));
    }

    std::unordered_set<std::string> names;
    m_.tensors_.reserve(size_t(nTensors));
    std::vector<uint64_t> relOffsets;
    relOffsets.reserve(size_t(nTensors));
    for (uint64_t i = 0; i < nTensors; ++i) {
      const std::string field = "tensor_info[" + std::to_string(i) + "]";
      TensorInfo t;
      t.name = readString((field + ".name").c_str());
      if (!names.insert(t.name).second) throwBadInput(m_.path_, t.name, "duplicate tensor name");
      const uint32_t nDims = r_.read<uint32_t>((t.name + ": n_dims").c_str());
      if (nDims > kMaxDims)
        throwBadInput(m_.path_, t.name,
                      "n_dims " + std::to_string(nDims) + " exceeds " + std::to_string(kMaxDims));
      std::vector<uint64_t> ne(nDims);
      uint64_t elems = 1;
      for (uint32_t d = 0; d < nDims; ++d) {
        ne[d] = r_.read<uint64_t>((t.name + ": ne").c_str());
        if (ne[d] > uint64_t(INT64_MAX) || (ne[d] != 0 && elems > uint64_t(INT64_MAX) / ne[d]))
          throwBadInput(m_.path_, t.name,
                        "dimension " + std::to_string(d) + " = " + std::to_string(ne[d]) +
                            " makes the element count overflow");
        elems *= ne[d];
      }
      for (uint32_t d = nDims; d-- > 0;) t.shape.push_back(int64_t(ne[d]));  // outermost first
      const uint32_t type = r_.read<uint32_t>((t.name + ": type").c_str());
      t.ggmlType = int32_t(std::min<uint32_t>(type, INT32_MAX));
      const uint64_t rel = r_.read<uint64_t>((t.name + ": offset").c_str());
      if (rel % alignment != 0)
        throwBadInput(m_.path_, t.name,
                      "data offset " + std::to_string(rel) + " is not a multiple of the alignment " +
                          std::to_string(alignment));
      const ggml::GgmlTypeTraits* tr = ggml::ggmlTypeTraits(type);
      if (tr) {
        t.dtype = tr->dtype;
        t.dtypeLabel = std::string(tr->name);
        // Blocks run along the innermost dimension: a row must be a whole number of blocks.
        const uint64_t row = nDims ? ne[0] : 1;
        if (row % tr->blockElems != 0)
          throwBadInput(m_.path_, t.name,
                        "row length " + std::to_string(row) + " is not a multiple of the " +
                            std::string(tr->name) + " block size " +
                            std::to_string(tr->blockElems));
        const uint64_t blocks = elems / tr->blockElems;
        if (blocks != 0 && tr->blockBytes > UINT64_MAX / blocks)
          throwBadInput(m_.path_, t.name, "byte size overflows");
        t.nbytes = blocks * tr->blockBytes;
      } else {
        // An id we cannot size: listed with the bytes up to the next tensor (set below).
        t.dtype = DType::Unknown;
        t.dtypeLabel = "ggml type " + std::to_string(type);
        t.nbytes = UINT64_MAX;
      }
      relOffsets.push_back(rel);
      m_.tensors_.push_back(std::move(t));
    }

    // Tensor data starts at the next multiple of the alignment.
    const uint64_t end = r_.offset();
    const uint64_t dataStart = (end + alignment - 1) / alignment * alignment;
    if (dataStart > m_.fileSize_ && !m_.tensors_.empty())
      throwBadInput(m_.path_, "tensor data",
                    "truncated: the data section would start at " + std::to_string(dataStart) +
                        ", the file has " + std::to_string(m_.fileSize_) + " bytes");
    const uint64_t dataBytes = m_.fileSize_ > dataStart ? m_.fileSize_ - dataStart : 0;

    // Bounds and overlaps, in file order.
    std::vector<size_t> order(m_.tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return relOffsets[a] < relOffsets[b]; });
    const TensorInfo* prev = nullptr;  // the non-empty tensor that ends last so far
    uint64_t prevRel = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      TensorInfo& t = m_.tensors_[order[k]];
      const uint64_t rel = relOffsets[order[k]];
      if (t.nbytes == UINT64_MAX) {  // unknown type: up to the next tensor or the end
        const uint64_t next = k + 1 < order.size() ? relOffsets[order[k + 1]] : dataBytes;
        t.nbytes = next > rel ? next - rel : 0;
      }
      if (rel > dataBytes || t.nbytes > dataBytes - rel)
        throwBadInput(m_.path_, t.name,
                      "data [" + std::to_string(rel) + ", +" + std::to_string(t.nbytes) +
                          ") runs past the end of the data section (" + std::to_string(dataBytes) +
                          " bytes)");
      // An empty tensor overlaps nothing, and must not hide an overlap of the tensors around
      // it: each tensor is checked against the furthest-reaching non-empty one before it.
      if (t.nbytes > 0) {
        if (prev && prevRel + prev->nbytes > rel)
          throwBadInput(m_.path_, t.name,
                        "data at offset " + std::to_string(rel) + " overlaps tensor " + prev->name +
                            " [" + std::to_string(prevRel) + ", " +
                            std::to_string(prevRel + prev->nbytes) + ")");
        if (!prev || rel + t.nbytes > prevRel + prev->nbytes) prev = &t, prevRel = rel;
      }
      t.offset = dataStart + rel;
    }
    fillConfig();
  }

 private:
  GgufFile& m_;
  ByteReader r_;
  bool wide_ = true;
  uint64_t metaValues_ = 0;  // array elements read so far, at every nesting level

  // Hyper-parameters from "<arch>.<key>" entries (llama.cpp's LLM_KV names).
  void fillConfig() {
    ModelConfig& c = m_.config_;
    const MetaEntry* archEntry = m_.findMeta("general.architecture");
    if (!archEntry) return;  // no architecture: weights only
    if (!archEntry->value.is_string())
      throwBadInput(m_.path_, "general.architecture", "must be a string, is a " + archEntry->type);
    const std::string arch = archEntry->value.get<std::string>();
    c.sourceArchitecture = arch;
    if (arch == "llama" || arch == "qwen2" || arch == "qwen3" || arch == "gpt2" || arch == "gemma" ||
        arch == "gemma2" || arch == "gemma3" || arch == "phi3")
      c.architecture = arch;
    // Integers must be scalars within int32 so that shape arithmetic can never overflow.
    auto integer = [&](const std::string& key) -> int64_t {
      const MetaEntry* e = m_.findMeta(key);
      if (!e || !e->value.is_number_integer()) return 0;
      const int64_t v = e->value.is_number_unsigned()
                            ? int64_t(std::min<uint64_t>(e->value.get<uint64_t>(), INT64_MAX))
                            : e->value.get<int64_t>();
      if (v < 0 || v > INT32_MAX)
        throwBadInput(m_.path_, key, "value " + e->value.dump() + " is outside [0, 2^31)");
      return v;
    };
    auto real = [&](const std::string& key) -> double {
      const MetaEntry* e = m_.findMeta(key);
      if (!e || !e->value.is_number()) return 0.0;
      const double v = e->value.get<double>();
      return std::isfinite(v) && v > 0 ? v : 0.0;
    };
    const std::string p = arch + ".";
    c.dim = integer(p + "embedding_length");
    c.hiddenDim = integer(p + "feed_forward_length");
    c.nLayers = integer(p + "block_count");
    c.nHeads = integer(p + "attention.head_count");
    c.nKvHeads = integer(p + "attention.head_count_kv");
    if (c.nKvHeads == 0) {
      // Absent: as many as the query heads. Present and 0: the attention would divide by it.
      if (const MetaEntry* e = m_.findMeta(p + "attention.head_count_kv"); e && c.nHeads > 0)
        throwBadInput(m_.path_, p + "attention.head_count_kv", "is 0 (at least 1 key/value head)");
      c.nKvHeads = c.nHeads;
    }
    // Each key/value head serves a whole group of query heads.
    if (c.nHeads > 0 && (c.nKvHeads > c.nHeads || c.nHeads % c.nKvHeads != 0))
      throwBadInput(m_.path_, p + "attention.head_count_kv",
                    std::to_string(c.nKvHeads) + " does not divide the " + std::to_string(c.nHeads) +
                        " attention heads (" + p + "attention.head_count)");
    c.maxSeqLen = integer(p + "context_length");
    c.vocabSize = integer(p + "vocab_size");
    // Without the key: the embedding's rows (what the model can take), else the token list
    // (a vocabulary-only file). The tokenizer is checked against this (findTokenizer).
    if (c.vocabSize == 0) {
      if (const TensorInfo* emb = m_.findTensor("token_embd.weight"); emb && emb->shape.size() == 2 && emb->shape[0] <= INT32_MAX)
        c.vocabSize = emb->shape[0];
    }
    if (c.vocabSize == 0) {
      if (const MetaEntry* tok = m_.findMeta("tokenizer.ggml.tokens"); tok && tok->value.is_array())
        c.vocabSize = int64_t(tok->value.size());
    }
    c.normEps = real(p + "attention.layer_norm_rms_epsilon");
    if (c.normEps == 0) c.normEps = real(p + "attention.layer_norm_epsilon");
    c.ropeTheta = real(p + "rope.freq_base");
    if (c.ropeTheta == 0 && (arch == "llama" || arch == "qwen2")) c.ropeTheta = 10000.0;  // llama.cpp's default
    const int64_t keyLength = integer(p + "attention.key_length");
    if (keyLength > 0 && c.nHeads > 0 && keyLength != c.dim / c.nHeads) c.explicitHeadDim = keyLength;
    c.tiedEmbeddings = m_.findTensor("output.weight") == nullptr;
    if (c.architecture.empty()) return;
    fillComputation(c, arch, integer, real);
  }

  // What changes the computation beyond the shapes (llama.cpp's LLM_KV names and the
  // per-architecture constants of its llama-model.cpp); what we do not implement is refused
  // naming the key and value.
  template <class Int, class Real>
  void fillComputation(ModelConfig& c, const std::string& arch, Int& integer, Real& real) {
    const std::string p = arch + ".";
    const bool gemma = arch == "gemma" || arch == "gemma2" || arch == "gemma3";
    if (c.ropeTheta == 0 && (arch == "qwen3" || gemma)) c.ropeTheta = 10000.0;
    auto str = [&](const std::string& key) -> std::string {
      const MetaEntry* e = m_.findMeta(key);
      return e && e->value.is_string() ? e->value.get<std::string>() : std::string();
    };
    if (arch == "gpt2") {
      c.activation = "gelu_tanh";
    } else {
      c.activation = gemma ? "gelu_tanh" : "silu";
    }
    const std::string scaling = str(p + "rope.scaling.type");
    if (!scaling.empty() && scaling != "none") {
      const double factor = real(p + "rope.scaling.factor");
      if (scaling != "linear")
        throwBadInput(m_.path_, p + "rope.scaling.type",
                      "RoPE scaling \"" + scaling + "\" is not implemented (none, linear are; llama3 "
                      "comes as the rope_freqs.weight tensor)");
      if (factor <= 0) throwBadInput(m_.path_, p + "rope.scaling.factor", "a linear RoPE needs a positive factor");
      if (factor != 1.0) {
        c.ropeType = "linear";
        c.ropeFactor = factor;
      }
    }
    if (const double f = real(p + "rope.scale_linear"); f > 0 && f != 1.0) {  // older key
      c.ropeType = "linear";
      c.ropeFactor = f;
    }
    // phi3 longrope (llama.cpp's converter): rope_factors_short/long.weight tensors, the
    // original context and the cos/sin multiplier transformers derives
    // (sqrt(1 + ln(factor) / ln(original))). Within the original context the short factors
    // apply; the runtime stops there.
    const bool longrope = arch == "phi3" && (m_.findTensor("rope_factors_short.weight") ||
                                             m_.findTensor("rope_factors_long.weight"));
    if (longrope) {
      if (c.ropeType != "default")
        throwBadInput(m_.path_, p + "rope.scaling.type", "\"" + c.ropeType + "\" together with longrope factors");
      c.ropeType = "longrope";
      c.ropeOriginalContext = integer(p + "rope.scaling.original_context_length");
      if (c.ropeOriginalContext <= 0)
        throwBadInput(m_.path_, p + "rope.scaling.original_context_length", "a longrope model needs it (missing or 0)");
      c.ropeContextCap = c.ropeOriginalContext;
      c.ropeFactor = c.maxSeqLen > 0 ? double(c.maxSeqLen) / double(c.ropeOriginalContext) : 1.0;
      const double a = real(p + "rope.scaling.attn_factor");
      c.ropeAttentionFactor = a > 0 ? a : 1.0;  // llama.cpp's default when the key is absent
    } else if (const double a = real(p + "rope.scaling.attn_factor"); a > 0 && a != 1.0) {
      throwBadInput(m_.path_, p + "rope.scaling.attn_factor",
                    "value " + std::to_string(a) + " is not implemented (only 1, or phi3 longrope)");
    }
    // Every other "<arch>." key is one we do not know what to do with: refused by name rather
    // than ignored (an expert count, a logit scale, a causal flag would change the result).
    static const char* const kKnown[] = {
        "context_length", "embedding_length", "block_count", "feed_forward_length", "vocab_size",
        "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
        "attention.layer_norm_epsilon", "attention.key_length", "attention.value_length",
        "attention.sliding_window", "attention.sliding_window_pattern", "attn_logit_softcapping",
        "final_logit_softcapping", "rope.freq_base", "rope.freq_base_swa", "rope.dimension_count",
        "rope.scaling.type", "rope.scaling.factor", "rope.scale_linear", "rope.scaling.attn_factor",
        "rope.scaling.original_context_length",
        // informational in llama.cpp (no effect on the computation)
        "rope.scaling.finetuned", "tensor_data_layout"};
    for (const MetaEntry& e : m_.metadata()) {
      if (e.key.compare(0, p.size(), p) != 0) continue;
      const std::string rest = e.key.substr(p.size());
      if (std::find(std::begin(kKnown), std::end(kKnown), rest) != std::end(kKnown)) continue;
      // Zero / false counts of features we do not have are harmless (expert_count 0).
      if ((e.value.is_number() && e.value.get<double>() == 0) || (e.value.is_boolean() && !e.value.get<bool>() &&
                                                                   rest != "attention.causal"))
        continue;
      if (rest == "attention.causal" && e.value.is_boolean() && e.value.get<bool>()) continue;
      throwBadInput(m_.path_, e.key, "value " + e.value.dump().substr(0, 60) + " is not implemented for " + arch);
    }
    if (const int64_t dimCount = integer(p + "rope.dimension_count");
        dimCount > 0 && dimCount != c.headDim())
      throwBadInput(m_.path_, p + "rope.dimension_count",
                    "partial RoPE (" + std::to_string(dimCount) + " of " + std::to_string(c.headDim()) +
                        " dimensions) is not implemented");
    const int64_t window = integer(p + "attention.sliding_window");
    if (window > 0) {
      c.slidingWindow = window;
      const MetaEntry* pat = m_.findMeta(p + "attention.sliding_window_pattern");
      if (pat && pat->value.is_array()) {  // one flag per layer
        if (int64_t(pat->value.size()) != c.nLayers)
          throwBadInput(m_.path_, pat->key, "has " + std::to_string(pat->value.size()) +
                                                " entries for " + std::to_string(c.nLayers) + " layers");
        c.slidingLayers.assign(size_t(c.nLayers), 0);
        for (size_t l = 0; l < pat->value.size(); ++l)
          c.slidingLayers[l] = pat->value[l].is_boolean() ? pat->value[l].get<bool>()
                                                          : pat->value[l].is_number() && pat->value[l].get<double>() != 0;
      } else if (arch == "gemma3") {  // llama.cpp: every 6th layer global, the others windowed
        int64_t pattern = integer(p + "attention.sliding_window_pattern");
        if (pattern <= 0) pattern = 6;
        c.slidingLayers.assign(size_t(c.nLayers), 0);
        for (int64_t l = 0; l < c.nLayers; ++l) c.slidingLayers[size_t(l)] = (l % pattern) < pattern - 1;
      } else if (arch == "gemma2") {  // even layers windowed
        c.slidingLayers.assign(size_t(c.nLayers), 0);
        for (int64_t l = 0; l < c.nLayers; l += 2) c.slidingLayers[size_t(l)] = 1;
      }
    }
    if (arch == "gemma3" && c.slidingWindow > 0) {
      // llama.cpp: the windowed layers rotate with rope.freq_base_swa (default 10000), unscaled.
      c.ropeLocalTheta = real(p + "rope.freq_base_swa");
      if (c.ropeLocalTheta == 0) c.ropeLocalTheta = 10000.0;
    } else if (real(p + "rope.freq_base_swa") > 0) {
      throwBadInput(m_.path_, p + "rope.freq_base_swa", "is not implemented for " + arch);
    }
    if (gemma) {
      c.embeddingScale = std::sqrt(double(c.dim));
      // llama.cpp: 1/sqrt(head_dim), except Gemma 2/3 27B (query_pre_attn_scalar = dim / heads).
      const bool big = (arch == "gemma3" && c.nLayers == 62) || (arch == "gemma2" && c.nLayers == 46);
      if (big && c.nHeads > 0) c.attentionScale = 1.0 / std::sqrt(double(c.dim / c.nHeads));
      c.attnSoftcap = real(p + "attn_logit_softcapping");
      c.finalSoftcap = real(p + "final_logit_softcapping");
    } else {
      for (const char* k : {"attn_logit_softcapping", "final_logit_softcapping"})
        if (real(p + k) > 0)
          throwBadInput(m_.path_, p + k, "soft-capping is not implemented for " + arch);
    }
  }

  uint64_t readCount(const char* field) {
    return wide_ ? r_.read<uint64_t>(field) : uint64_t(r_.read<uint32_t>(field));
  }

  std::string readString(const char* field) {
    const uint64_t n = readCount(field);
    r_.need(n, field);  // the length is checked against what is left before anything is copied
    const uint64_t at = r_.offset();
    auto bytes = r_.readBytes(n, field);
    std::string s(reinterpret_cast<const char*>(bytes.data()), size_t(n));
    // GGUF strings are UTF-8; invalid bytes would make every JSON view of the file throw.
    if (const size_t bad = invalidUtf8At(s); bad != std::string_view::npos)
      throwBadInput(m_.path_, field,
                    "string is not valid UTF-8 (byte " + std::to_string(uint8_t(s[bad])) + " at offset " +
                        std::to_string(at + bad) + ")");
    return s;
  }

  static uint64_t minValueBytes(uint32_t type, bool wide) {
    switch (GgufType(type)) {
      case GgufType::U8: case GgufType::I8: case GgufType::Bool: return 1;
      case GgufType::U16: case GgufType::I16: return 2;
      case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
      case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
      case GgufType::String: return wide ? 8 : 4;
      case GgufType::Array: return 4 + (wide ? 8 : 4);
    }
    return 1;
  }

  // Reads one value of `type`; `typeName` receives GGUF's own name ("u32", "array[string]").
  nlohmann::json readValue(uint32_t type, const std::string& key, int depth,
                           std::string& typeName) {
    const std::string_view name = ggufTypeName(type);
    if (name.empty())
      throwBadInput(m_.path_, key, "unknown metadata value type " + std::to_string(type));
    typeName = std::string(name);
    const char* f = key.c_str();
    switch (GgufType(type)) {
      case GgufType::U8: return r_.read<uint8_t>(f);
      case GgufType::I8: return r_.read<int8_t>(f);
      case GgufType::U16: return r_.read<uint16_t>(f);
      case GgufType::I16: return r_.read<int16_t>(f);
      case GgufType::U32: return r_.read<uint32_t>(f);
      case GgufType::I32: return r_.read<int32_t>(f);
      case GgufType::U64: return r_.read<uint64_t>(f);
      case GgufType::I64: return r_.read<int64_t>(f);
      case GgufType::F32: return f32ToJson(r_.read<float>(f));
      case GgufType::F64: return r_.read<double>(f);
      case GgufType::Bool: {
        const uint8_t b = r_.read<uint8_t>(f);
        if (b > 1) throwBadInput(m_.path_, key, "bool value " + std::to_string(b) + " is not 0 or 1");
        return b != 0;
      }
      case GgufType::String: return readString(f);
      case GgufType::Array: {
        if (depth >= kMaxArrayDepth)
          throwBadInput(m_.path_, key,
                        "arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
        const uint32_t elemType = r_.read<uint32_t>(f);
        const uint64_t n = readCount(f);
        if (ggufTypeName(elemType).empty())
          throwBadInput(m_.path_, key, "unknown array element type " + std::to_string(elemType));
        const uint64_t minBytes = minValueBytes(elemType, wide_);
        if (n > r_.remaining() / minBytes)
          throwBadInput(m_.path_, key,
                        "array claims " + std::to_string(n) + " elements; the file has room for at most " +
                            std::to_string(r_.remaining() / minBytes));
        if (n > kMaxArrayElems)
          throwBadInput(m_.path_, key,
                        "array of " + std::to_string(n) + " elements exceeds the limit of " +
                            std::to_string(kMaxArrayElems));
        metaValues_ += n;
        if (metaValues_ > kMaxMetaValues)
          throwBadInput(m_.path_, key,
                        "the metadata arrays hold more than " + std::to_string(kMaxMetaValues) +
                            " values in all (nested arrays count every element)");
        nlohmann::json arr = nlohmann::json::array();
        arr.get_ref<nlohmann::json::array_t&>().reserve(size_t(n));
        std::string elemName = std::string(ggufTypeName(elemType));
        for (uint64_t i = 0; i < n; ++i) {
          std::string inner;
          arr.push_back(readValue(elemType, key, depth + 1, inner));
          if (i == 0 && elemType == uint32_t(GgufType::Array)) elemName = inner;
        }
        typeName = "array[" + elemName + "]";
        return arr;
      }
    }
    return nullptr;
  }
};

}  // namespace

std::unique_ptr<ModelFile> openGguf(const std::string& path) {
  auto model = std::make_unique<GgufFile>(std::make_unique<MappedFile>(path), 0);
  GgufParser(*model).parse();
  return model;
}

}  // namespace qs

#include "core/model/llama2c_reader.h"

#include <array>
#include <cstring>

#include "core/io/mapped_file.h"
#include "kernels/common/error.h"

namespace qs {
namespace {

constexpr uint32_t kMagicV1 = 0x616b3432;  // "ak42" as a little-endian uint32
constexpr uint64_t kV1HeaderBytes = 256;
constexpr uint64_t kLegacyHeaderBytes = 7 * 4;

// Sanity limits on header values. They are far above any real llama2.c model and exist only so a
// corrupt header is reported as such instead of driving arithmetic into overflow.
constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxLayers = 1 << 10;
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int64_t kMaxSeq = 1 << 22;

struct Header {
  int32_t dim, hiddenDim, nLayers, nHeads, nKvHeads, vocabSize, seqLen;
};

class Llama2cFile final : public ModelFile {
 public:
  Llama2cFile(std::unique_ptr<MappedFile> file, int version)
      : file_(std::move(file)), version_(version) {
    path_ = file_->path();
    fileSize_ = file_->size();
  }
  ModelFormat format() const override { return ModelFormat::Llama2c; }
  std::string formatDescription() const override {
    return version_ == 0 ? "llama2.c checkpoint (legacy header)"
                         : "llama2.c checkpoint (version 1 header, \"ak42\")";
  }
  std::span<const std::byte> tensorBytes(const TensorInfo& t) const override {
    return file_->bytes().subspan(size_t(t.offset), size_t(t.nbytes));
  }

  std::unique_ptr<MappedFile> file_;
  int version_;
  std::vector<TensorInfo>& mutableTensors() { return tensors_; }
  ModelConfig& mutableConfig() { return config_; }
  std::vector<MetaEntry>& mutableMetadata() { return metadata_; }
};

void checkRange(const std::string& file, const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi)
    throwBadInput(file, field,
                  "value " + std::to_string(v) + " is outside the plausible range [" +
                      std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// Validates the hyper-parameters against each other. Throws BadInput naming the field.
void validate(const std::string& file, const Header& h) {
  checkRange(file, "header.dim", h.dim, 1, kMaxDim);
  checkRange(file, "header.hidden_dim", h.hiddenDim, 1, 4 * kMaxDim);
  checkRange(file, "header.n_layers", h.nLayers, 1, kMaxLayers);
  checkRange(file, "header.n_heads", h.nHeads, 1, h.dim);
  checkRange(file, "header.n_kv_heads", h.nKvHeads, 1, h.nHeads);
  checkRange(file, "header.vocab_size", h.vocabSize < 0 ? -int64_t(h.vocabSize) : h.vocabSize, 1,
             kMaxVocab);
  checkRange(file, "header.seq_len", h.seqLen, 1, kMaxSeq);
  if (h.dim % h.nHeads != 0)
    throwBadInput(file, "header.n_heads",
                  "dim " + std::to_string(h.dim) + " is not divisible by n_heads " +
                      std::to_string(h.nHeads));
  if (h.nHeads % h.nKvHeads != 0)
    throwBadInput(file, "header.n_kv_heads",
                  "n_heads " + std::to_string(h.nHeads) + " is not divisible by n_kv_heads " +
                      std::to_string(h.nKvHeads));
  if ((h.dim / h.nHeads) % 2 != 0)
    throwBadInput(file, "header.n_heads", "head size " + std::to_string(h.dim / h.nHeads) +
                                              " is odd; RoPE needs an even head size");
}

// Lays out the tensors of one checkpoint. Returns the byte count the layout needs.
// The header values are bounded (validate), so no product below can overflow 64 bits.
uint64_t layout(Llama2cFile& m, const Header& h, int version, bool sharedClassifier,
                uint64_t dataStart) {
  const int64_t d = h.dim, hd = h.hiddenDim, L = h.nLayers, V = std::abs(h.vocabSize);
  const int64_t headSize = d / h.nHeads, kvDim = headSize * h.nKvHeads;
  auto& ts = m.mutableTensors();
  ts.clear();
  uint64_t cursor = dataStart;

  // Places a [L, shape...] stack of per-layer tensors contiguously, as both formats do.
  struct Pending {
    std::string name;
    std::vector<int64_t> shape;
    uint64_t offset;
  };
  std::vector<Pending> pending;
  auto place = [&](const std::string& name, std::vector<int64_t> shape) {
    uint64_t n = 1;
    for (int64_t s : shape) n *= uint64_t(s);
    pending.push_back({name, std::move(shape), cursor});
    cursor += n * 4;
  };
  auto placeLayers = [&](const std::string& pattern, std::vector<int64_t> shape) {
    for (int64_t l = 0; l < L; ++l) place("layers." + std::to_string(l) + "." + pattern, shape);
  };

  if (version == 0) {
    place("tok_embeddings.weight", {V, d});
    placeLayers("attention_norm.weight", {d});
    placeLayers("attention.wq.weight", {d, d});
    placeLayers("attention.wk.weight", {kvDim, d});
    placeLayers("attention.wv.weight", {kvDim, d});
    placeLayers("attention.wo.weight", {d, d});
    placeLayers("ffn_norm.weight", {d});
    placeLayers("feed_forward.w1.weight", {hd, d});
    placeLayers("feed_forward.w2.weight", {d, hd});
    placeLayers("feed_forward.w3.weight", {hd, d});
    place("norm.weight", {d});
    place("freqs_cos", {h.seqLen, headSize / 2});
    place("freqs_sin", {h.seqLen, headSize / 2});
  } else {
    placeLayers("attention_norm.weight", {d});
    placeLayers("ffn_norm.weight", {d});
    place("norm.weight", {d});
    place("tok_embeddings.weight", {V, d});
    placeLayers("attention.wq.weight", {d, d});
    placeLayers("attention.wk.weight", {kvDim, d});
    placeLayers("attention.wv.weight", {kvDim, d});
    placeLayers("attention.wo.weight", {d, d});
    placeLayers("feed_forward.w1.weight", {hd, d});
    placeLayers("feed_forward.w2.weight", {d, hd});
    placeLayers("feed_forward.w3.weight", {hd, d});
  }
  if (!sharedClassifier) place("output.weight", {V, d});

  for (auto& p : pending) {
    TensorInfo t;
    t.name = p.name;
    t.dtype = DType::F32;
    t.dtypeLabel = "F32";
    t.shape = p.shape;
    t.offset = p.offset;
    t.nbytes = t.elements() * 4;
    t.isParameter = p.name.rfind("freqs_", 0) != 0;  // RoPE tables are buffers
    ts.push_back(std::move(t));
  }
  // List in logical order (embeddings, then block by block, then head) rather than file order.
  auto rank = [](const std::string& n) -> std::pair<int64_t, int> {
    if (n.rfind("tok_embeddings", 0) == 0) return {-1, 0};
    if (n.rfind("layers.", 0) == 0) {
      const int64_t layer = std::stoll(n.substr(7));
      static const std::array<const char*, 9> order = {
          "attention_norm", "attention.wq", "attention.wk", "attention.wv", "attention.wo",
          "ffn_norm",       "feed_forward.w1", "feed_forward.w2", "feed_forward.w3"};
      const std::string rest = n.substr(n.find('.', 7) + 1);
      for (int i = 0; i < int(order.size()); ++i)
        if (rest.rfind(order[i], 0) == 0) return {layer, i};
      return {layer, 99};
    }
    if (n == "norm.weight") return {1 << 30, 0};
    if (n == "output.weight") return {1 << 30, 1};
    return {1 << 30, 2};
  };
  std::stable_sort(ts.begin(), ts.end(), [&](const TensorInfo& a, const TensorInfo& b) {
    return rank(a.name) < rank(b.name);
  });
  return cursor;
}

}  // namespace

bool looksLikeLlama2c(std::span<const std::byte> head, uint64_t fileSize) {
  if (head.size() >= 4) {
    uint32_t magic;
    std::memcpy(&magic, head.data(), 4);
    if (magic == kMagicV1) return true;
  }
  if (head.size() < kLegacyHeaderBytes || fileSize < kLegacyHeaderBytes) return false;
  Header h;
  std::memcpy(&h, head.data(), sizeof h);
  // Plausible legacy header: all positive (vocab may be negative) and within the sanity limits.
  return h.dim > 0 && h.dim <= kMaxDim && h.hiddenDim > 0 && h.nLayers > 0 &&
         h.nLayers <= kMaxLayers && h.nHeads > 0 && h.nKvHeads > 0 && h.vocabSize != 0 &&
         std::abs(int64_t(h.vocabSize)) <= kMaxVocab && h.seqLen > 0 && h.seqLen <= kMaxSeq;
}

std::unique_ptr<ModelFile> openLlama2c(const std::string& path) {
  auto mapped = std::make_unique<MappedFile>(path);
  const uint64_t size = mapped->size();
  ByteReader r(mapped->bytes(), path);

  int version = 0;
  Header h{};
  bool shared = true;
  uint64_t dataStart = kLegacyHeaderBytes;
  if (size >= 4) {
    uint32_t magic;
    std::memcpy(&magic, mapped->bytes().data(), 4);
    if (magic == kMagicV1) {
      r.skip(4, "header.magic");
      version = r.read<int32_t>("header.version");
      if (version != 1)
        throw Error(ErrorKind::Unsupported,
                    "llama2.c version " + std::to_string(version) +
                        " is not supported (only the legacy header and version 1)",
                    path, "header.version");
      dataStart = kV1HeaderBytes;
    }
  }
  h.dim = r.read<int32_t>("header.dim");
  h.hiddenDim = r.read<int32_t>("header.hidden_dim");
  h.nLayers = r.read<int32_t>("header.n_layers");
  h.nHeads = r.read<int32_t>("header.n_heads");
  h.nKvHeads = r.read<int32_t>("header.n_kv_heads");
  h.vocabSize = r.read<int32_t>("header.vocab_size");
  h.seqLen = r.read<int32_t>("header.seq_len");
  if (version == 1) {
    shared = r.read<uint8_t>("header.shared_classifier") != 0;
    if (h.vocabSize < 0) throwBadInput(path, "header.vocab_size", "negative in a version 1 file");
    r.need(kV1HeaderBytes - (r.offset()), "header.padding");
  } else {
    shared = h.vocabSize > 0;
  }
  validate(path, h);

  auto model = std::make_unique<Llama2cFile>(std::move(mapped), version);
  const uint64_t needed = layout(*model, h, version, shared, dataStart);
  if (size != needed) {
    throwBadInput(path, size < needed ? "weights" : "file size",
                  std::string(size < needed ? "truncated" : "has trailing bytes") +
                      ": the header describes " + std::to_string(needed) +
                      " bytes (dim " + std::to_string(h.dim) + ", hidden_dim " +
                      std::to_string(h.hiddenDim) + ", n_layers " + std::to_string(h.nLayers) +
                      ", vocab " + std::to_string(std::abs(h.vocabSize)) + "), the file has " +
                      std::to_string(size));
  }

  ModelConfig& c = model->mutableConfig();
  c.architecture = "llama";
  c.dim = h.dim;
  c.hiddenDim = h.hiddenDim;
  c.nLayers = h.nLayers;
  c.nHeads = h.nHeads;
  c.nKvHeads = h.nKvHeads;
  c.vocabSize = std::abs(h.vocabSize);
  c.maxSeqLen = h.seqLen;
  c.normEps = 1e-5;       // llama2.c's run.c hard-codes 1e-5
  c.ropeTheta = 10000.0;  // and theta 10000
  c.tiedEmbeddings = shared;

  auto& meta = model->mutableMetadata();
  meta.push_back({"llama2c.version", "i32", version});
  meta.push_back({"llama2c.shared_classifier", "bool", shared});
  return model;
}

}  // namespace qs

#include "core/plan/model_hash.h"

#include <xxhash.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/model/model_file.h"
#include "core/plan/layer_names.h"
#include "kernels/common/error.h"

namespace qs {
namespace {

constexpr uint64_t kWindowBytes = 4096;

class Hasher {
 public:
  Hasher() : state_(XXH3_createState(), &XXH3_freeState) {
    if (!state_ || XXH3_64bits_reset(state_.get()) != XXH_OK)
      throw Error(ErrorKind::Internal, "xxhash: cannot initialise a hash state");
  }
  void bytes(const void* data, size_t n) {
    if (n && XXH3_64bits_update(state_.get(), data, n) != XXH_OK)
      throw Error(ErrorKind::Internal, "xxhash: update failed");
  }
  // Strings carry their length so that ("ab", "c") and ("a", "bc") hash differently.
  void text(const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  }
  void u64(uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));  // little-endian
    bytes(b, 8);
  }
  uint64_t digest() const { return XXH3_64bits_digest(state_.get()); }

 private:
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state_;
};

}  // namespace

std::string sampledModelHash(const ModelFile& model) {
  Hasher h;
  h.text("quantscope-model-hash-v1");
  h.text(std::string(modelFormatName(model.format())));
  h.text(model.config().toJson().dump());
  const auto& tensors = model.tensors();
  h.u64(tensors.size());
  for (const auto& t : tensors) {
    h.text(t.name);
    h.text(t.dtypeLabel);
    h.u64(t.shape.size());
    for (int64_t d : t.shape) h.u64(uint64_t(d));
    h.u64(t.nbytes);
  }
  for (const auto& t : tensors) {
    const std::span<const std::byte> b = model.tensorBytes(t);
    if (b.size() <= 3 * kWindowBytes) {
      h.bytes(b.data(), b.size());
    } else {
      const size_t mid = (b.size() - kWindowBytes) / 2;
      h.bytes(b.data(), kWindowBytes);
      h.bytes(b.data() + mid, kWindowBytes);
      h.bytes(b.data() + b.size() - kWindowBytes, kWindowBytes);
    }
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.digest()));
  return std::string("xxh3-64-sampled:") + hex;
}

bool sameHashAlgorithm(std::string_view a, std::string_view b) {
  const size_t ca = a.find(':'), cb = b.find(':');
  return ca != std::string_view::npos && cb != std::string_view::npos && a.substr(0, ca) == b.substr(0, cb);
}

ModelIdentity modelIdentity(const ModelFile& model, const ModelGraph& graph) {
  ModelIdentity id;
  namespace fs = std::filesystem;
  const fs::path p(model.path());
  std::string stem = fs::is_directory(p) ? p.filename().string() : p.stem().string();
  // HF checkpoints: "model.safetensors", "model-00001-of-00002.safetensors",
  // "model.safetensors.index.json" say nothing; the folder names the model.
  if (!fs::is_directory(p) && (stem == "model" || stem.rfind("model-", 0) == 0 ||
                               stem.rfind("model.safetensors", 0) == 0)) {
    const fs::path parent = fs::absolute(p).parent_path();
    if (!parent.filename().empty()) stem = parent.filename().string();
  }
  if (stem.empty()) stem = p.string();
  id.name = stem;
  id.hash = sampledModelHash(model);
  id.architecture = graph.architecture;
  const auto layers = planLayers(graph);
  id.linearLayers = int64_t(layers.size());
  for (const auto& l : layers) id.parameters += uint64_t(l.linear->outFeatures * l.linear->inFeatures);
  return id;
}

}  // namespace qs

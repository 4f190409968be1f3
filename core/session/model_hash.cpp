#include "core/session/model_hash.h"

#define XXH_INLINE_ALL  // header-only use of libxxhash-dev's xxhash.h
#include <xxhash.h>

#include <cstdio>
#include <memory>

#include "kernels/common/error.h"

namespace qs {

namespace {
struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
}  // namespace

std::string modelContentHash(const ModelFile& model, const JobContext& ctx) {
  std::unique_ptr<XXH3_state_t, StateDeleter> st(XXH3_createState());
  if (!st || XXH3_128bits_reset(st.get()) != XXH_OK)
    throw Error(ErrorKind::Internal, "cannot set up the hash state");
  auto add = [&](const void* p, size_t n) { XXH3_128bits_update(st.get(), p, n); };
  auto addString = [&](const std::string& s) {
    const uint64_t n = s.size();
    add(&n, sizeof n);  // length-prefixed: no two sequences of strings collide by concatenation
    add(s.data(), s.size());
  };
  addString("quantscope-model-v1");
  addString(model.config().toJson().dump());
  const auto& tensors = model.tensors();
  uint64_t total = 0, done = 0;
  for (const auto& t : tensors) total += t.nbytes;
  for (const TensorInfo& t : tensors) {
    ctx.checkCancelled();
    addString(t.name);
    addString(t.dtypeLabel);
    const uint64_t rank = t.shape.size();
    add(&rank, sizeof rank);
    for (int64_t d : t.shape) add(&d, sizeof d);
    const auto bytes = model.tensorBytes(t);
    const uint64_t n = bytes.size();
    add(&n, sizeof n);
    add(bytes.data(), bytes.size());
    done += t.nbytes;
    if (total) ctx.progress(double(done) / double(total), "hashing the model");
  }
  const XXH128_hash_t h = XXH3_128bits_digest(st.get());
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return std::string("xxh3-128:") + hex;
}

}  // namespace qs

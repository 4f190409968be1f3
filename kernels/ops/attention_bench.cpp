// What both builds share of `bench attention`: the FLOP count and the option checks.
#include "kernels/ops/attention_bench.h"

#include <algorithm>

#include "kernels/common/error.h"

namespace qs {

double attentionFlops(int64_t tokens, int heads, int headDim, int window) {
  double visible = 0;
  for (int64_t t = 0; t < tokens; ++t) visible += double(window > 0 ? std::min<int64_t>(t + 1, window) : t + 1);
  return 4.0 * headDim * heads * visible;
}

void validateAttentionBench(const AttentionBenchOptions& o) {
  if (o.tokens < 2 || o.tokens > 65536) throwBadInput("", "--tokens", std::to_string(o.tokens) + " is not in 2..65536");
  if (o.heads < 1 || o.heads > 256) throwBadInput("", "--heads", std::to_string(o.heads) + " is not in 1..256");
  if (o.kvHeads < 1 || o.heads % o.kvHeads != 0)
    throwBadInput("", "--kv-heads", std::to_string(o.kvHeads) + " does not divide --heads " + std::to_string(o.heads));
  if (o.headDim < 4 || o.headDim > 256 || o.headDim % 4 != 0)
    throwBadInput("", "--head-dim", std::to_string(o.headDim) + " is not a multiple of 4 in 4..256");
  if (o.window < 0) throwBadInput("", "--window", "must be 0 (none) or positive");
  if (!(o.softcap >= 0.0f) || o.softcap > 1e6f) throwBadInput("", "--softcap", "must be 0 (none) or positive");
  if (o.repeats < 3 || o.repeats > 1000) throwBadInput("", "--repeats", std::to_string(o.repeats) + " is not in 3..1000");
  const auto names = attentionBenchKernels();
  for (const auto& k : o.kernels)
    if (std::find(names.begin(), names.end(), k) == names.end()) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      throwBadInput("", "--kernels", "'" + k + "' is not one of " + list);
    }
  // q, caches and out: 4 · T · heads · headDim floats at most; keep it far from device limits.
  if (double(o.tokens) * o.heads * o.headDim * 4 * 4 > double(8ull << 30))
    throwBadInput("", "--tokens", "tokens × heads × head-dim needs more than 8 GiB of tensors");
}

std::vector<std::string> attentionBenchKernels() { return {"fp32", "mma", "mma-warp-split"}; }

}  // namespace qs

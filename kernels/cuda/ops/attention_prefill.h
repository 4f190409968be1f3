#pragma once
// The tensor-core prefill attention (attention_prefill_mma.cu), which attention.cu's attention()
// tries first for T > 1 queries once the new keys and values are in the caches. Device pointers.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace qs::cuda_ops {

struct PrefillAttentionArgs {
  const float* q = nullptr;  // [T, nHeads·headDim], RoPE applied
  const float* kCache = nullptr;  // [maxSeq, nKvHeads·headDim], rows up to the last position written
  const float* vCache = nullptr;
  const int32_t* positions = nullptr;  // [T], ascending
  int64_t T = 0;
  int nHeads = 0, nKvHeads = 0, headDim = 0;
  float scale = 0.0f;  // the score scale (resolved: 1/sqrt(headDim) unless the model sets one)
  int window = 0;      // sliding window (0: none)
  float softcap = 0.0f;
  float* out = nullptr;  // [T, nHeads·headDim]
};

// Launches it and returns true where it applies: T ≥ 2, head sizes 64, 80 and 128, 16-byte
// aligned tensors, sm_80 or newer, and QS_PREFILL_ATTENTION not "fp32" (which keeps the CUDA-core
// kernel, for comparisons; "mma-warp-split" runs the variant that splits the tiles per warp).
// Otherwise false, and nothing ran.
bool prefillAttentionMma(const PrefillAttentionArgs& a, cudaStream_t stream);

}  // namespace qs::cuda_ops

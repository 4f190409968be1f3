#pragma once
// The prefill attention (T > 1 queries once the new keys and values are in the caches): the
// tensor-core kernel (attention_prefill_mma.cu) where it applies, else the CUDA-core tiled kernel
// (attention.cu). attention() runs the one QS_PREFILL_ATTENTION names; `bench attention` times
// each by name. Device pointers.
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

// The prefill attention kernels. All compute FP32 scores, softmax and sums and meet the same
// bounds against the CPU; the three tensor-core variants give the same outputs bit for bit.
enum class PrefillKernel {
  CudaCores,          // "fp32": the tiled kernel, a lane per key (any head size up to 256)
  Mma,                // "mma": tensor cores (3xTF32), key and value tiles split into TF32 parts
                      // once, as staged (the default)
  MmaWarpSplit,       // "mma-warp-split": tiles staged as FP32, split by every warp at each read
};
inline constexpr PrefillKernel kPrefillKernels[] = {PrefillKernel::CudaCores, PrefillKernel::Mma,
                                                    PrefillKernel::MmaWarpSplit};
const char* prefillKernelName(PrefillKernel k);
// The kernel QS_PREFILL_ATTENTION names (read once; unset or unknown: Mma), CudaCores below sm_80.
PrefillKernel prefillKernelFromEnvironment();

// Launches tensor-core kernel `kernel` and returns true where it applies: T ≥ 2, head sizes 64,
// 80 and 128, 16-byte aligned tensors, sm_80 or newer, and kernel not CudaCores. Otherwise
// false, and nothing ran.
bool prefillAttentionMma(const PrefillAttentionArgs& a, PrefillKernel kernel, cudaStream_t stream);

// Runs `kernel` where it applies, else the CUDA-core kernel; returns the kernel that ran
// (attention.cu).
PrefillKernel prefillAttention(const PrefillAttentionArgs& a, PrefillKernel kernel, cudaStream_t stream);

}  // namespace qs::cuda_ops

#pragma once
// Kernels for weights in ggml's block formats (Q4_0 … Q6_K, the types an auto-planned GGUF holds),
// read in the blocks themselves: no conversion to another layout, so the device holds what the
// GGUF file holds (each block padded to a multiple of 4 bytes, kernels/gemm/ggml_packing.h).
//
//   m <= kGgmlGemvMaxTokens  launchGgmlGemv: Q4_K, Q5_K, Q6_K on the tensor cores (a warp per
//                            16-row tile, the codes widened to FP16 in registers, FP32 sums,
//                            per-sub-block scales applied to the slices' sums); the other types
//                            on CUDA cores, a warp per 2 rows, each lane decoding 8 values of
//                            every 256 straight from the block bytes.
//   larger m                 launchGgmlDequantF16 into a scratch FP16 weight, then cuBLAS FP16.
//
// Every type's value is w = s·q + o per run of 4 consecutive values (q the integer code, s its
// sub-block's scale and o its offset as ggml computes them in FP32, e.g. Q4_K s = d·sc, o = −dmin·m).
// The decode kernel sums s·Σ(q·x) + o·Σx per run (the same sum as Σ w·x, in another FP32
// order); the dequant kernel writes FP16(s·q + o) with ggml's two FP32 operations, so its FP16
// values are exactly FP16 of kernels/ggml's dequantize (tested).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/gemm/ggml_packing.h"

namespace qs::cuda_gemm {

// In the order of QuantKind's ggml kinds (and GemmWeightType's ggml values).
enum class GgmlBlockType : int { Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K };
inline constexpr int kGgmlBlockTypes = 10;

struct GgmlDeviceWeight {
  const uint8_t* blocks = nullptr;  // [n][k / values] device blocks, rows contiguous
  GgmlBlockType type = GgmlBlockType::Q4_K;
  int n = 0, k = 0;                 // k: a multiple of the type's block values
};

inline constexpr int kGgmlGemvMaxTokens = 8;

// y[m, n] = x[m, k] · Wᵀ, x and y FP16 row-major (16-byte aligned), 1 <= m <= kGgmlGemvMaxTokens.
// Q4_K, Q5_K and Q6_K run on the tensor cores ("ggml-gemv-mma"), the other types on CUDA cores
// ("ggml-gemv"): ggmlGemvName says which.
void launchGgmlGemv(const GgmlDeviceWeight& w, const void* x, int m, void* y, cudaStream_t stream);
const char* ggmlGemvName(GgmlBlockType type);
// out[r, c] = FP16(w[r, c]) for r < n, c < k, row pitch ld (ld >= k, ld % 4 == 0; out 8-byte aligned).
void launchGgmlDequantF16(const GgmlDeviceWeight& w, void* out, int ld, cudaStream_t stream);

}  // namespace qs::cuda_gemm

#pragma once
// SwiGLU of FP16 gate and up products (+ biases) rounded to FP16, expression for expression, for
// every kernel that computes it: swigluHalfKernel (kernels/cuda/ops/transformer_kernels.cu) and
// the skinny GEMM's SwiGLU prologue (kernels/cuda/gemm/gemm_skinny.cu), so the down projection's
// activations are the same bits either way (test_gemm_gpu checks it).
#include <cuda_fp16.h>

namespace qs::cuda {

// silu(g)·u with g and u already in FP32 (fromHalf + bias), rounded once to FP16.
__device__ __forceinline__ __half swigluToHalf(float g, float u) {
  return __float2half_rn(__fmul_rn(__fdiv_rn(g, 1.0f + expf(-g)), u));
}

}  // namespace qs::cuda

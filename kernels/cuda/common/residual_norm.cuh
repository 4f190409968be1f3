#pragma once
// The residual step's RMS norm, expression for expression, for every kernel that computes it:
// residualRmsNormKernel (kernels/cuda/ops) and the skinny GEMM's norm prologue
// (kernels/cuda/gemm/gemm_skinny.cu) both build it from these pieces with blocks of 256 threads,
// thread t taking the values t, t + 256, …; so the normed activations the GEMM stages are the
// ones residualRmsNorm writes, bit for bit (test_gemm_gpu checks it).
#include <cuda_fp16.h>

#include <cstdint>

namespace qs::cuda {

constexpr int kResidualNormThreads = 256;

// The residual stream after an FP16 product (+ bias) is added: x + (delta + bias).
__device__ __forceinline__ float residualAdd(float x, const __half* delta, const float* bias, int64_t i) {
  return delta ? x + (__half2float(delta[i]) + (bias ? bias[i] : 0.0f)) : x;
}

// x[i] += delta[i] + bias[i mod D] for i = first, first + stride, … < n: the residual add a
// kernel commits on the way (TransformerOps::ResidualCommit), over its grid.
__device__ __forceinline__ void commitResidualAdd(float* x, const __half* delta, const float* bias, int64_t n,
                                                  int64_t D, int64_t first, int64_t stride) {
  for (int64_t i = first; i < n; i += stride) {
    const int64_t r = i / D;
    x[i] = residualAdd(x[i], delta + r * D, bias, i - r * D);
  }
}

// One term of the sum of squares, in double (the CPU reference's precision).
__device__ __forceinline__ double addSquare(double ss, float v) { return fma(double(v), double(v), ss); }

// Sum over a block of Warps warps, every thread gets the result; fixed order (deterministic).
// `red` holds Warps values.
template <int Warps, typename T>
__device__ T blockSum(T v, T* red) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // red may still be read from a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  T t = 0;
  for (int i = 0; i < Warps; ++i) t += red[i];
  return t;
}

__device__ __forceinline__ float rmsInverse(double sumSquares, int64_t D, float eps) {
  return 1.0f / sqrtf(float(sumSquares / double(D)) + eps);
}

__device__ __forceinline__ float rmsScaled(float v, float inv, float w) { return __fmul_rn(__fmul_rn(v, inv), w); }

}  // namespace qs::cuda

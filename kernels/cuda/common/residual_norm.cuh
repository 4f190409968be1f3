#pragma once
// The residual step's RMS norm, expression for expression, for every kernel that computes it:
// residualRmsNormKernel (kernels/cuda/ops) and the skinny GEMM's norm prologue and epilogue
// (kernels/cuda/gemm/gemm_skinny.cu) all build it from these pieces, the sum of squares in one
// order (below); so the normed activations the GEMM stages are the ones residualRmsNorm writes,
// bit for bit (test_gemm_gpu checks it).
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

// The sum of squares S of a row of D values, in the one order every kernel of the residual step
// uses, so that a GEMM that commits the stream one row group of 128 at a time can leave each
// group's part for the next GEMM to finish, bit for bit what residualRmsNorm computes
// (kernels/cuda/gemm/gemm_skinny.cu's norm epilogue; docs/runtime.md). In double:
//   chunk c = values [128c, 128c + 128), zeros past D;
//   for w, g in 0..7: s(w, g) = v[16w + g + 8]^2 + v[16w + g]^2 of the chunk (one fma; a float's
//   square is exact in double);
//   W(w) = ((s(w,0) + s(w,1)) + (s(w,2) + s(w,3))) + ((s(w,4) + s(w,5)) + (s(w,6) + s(w,7)));
//   P(c) = W(0) + W(1) + … + W(7) and S = P(0) + P(1) + …, left to right.
// In a block of 256 threads, lane 4g + t of warp w holds s(w, g) of one chunk (t picks which of
// four), and the tree over g is three xor shuffles; the skinny GEMM's fragments put rows 16w + g
// and 16w + g + 8 of a row group on the same lanes.
constexpr int kChunkValues = 128;
__device__ __forceinline__ double pairSquares(float lo, float hi) {
  return fma(double(hi), double(hi), double(lo) * double(lo));
}
// W(w) from s(w, g) of lanes 4g + t (every lane of the warp calls; all get the sum).
__device__ __forceinline__ double treeOverG(double s) {
  s += __shfl_xor_sync(0xFFFFFFFFu, s, 4);
  s += __shfl_xor_sync(0xFFFFFFFFu, s, 8);
  s += __shfl_xor_sync(0xFFFFFFFFu, s, 16);
  return s;
}
// P(c) from W(0..7) at w[0], w[stride], …
__device__ __forceinline__ double chunkSum(const double* w, int stride) {
  double p = w[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) p += w[i * stride];
  return p;
}

// S of one row for a block of kResidualNormThreads threads, in rounds of kSquarePasses passes of
// four chunks (4,096 values a round). In pass j of round r, thread (w, lane 4g + t) holds the
// values at squareIndex(r, j, 0) and (r, j, 1): v[j][0..1], zeros past D.
constexpr int kSquarePasses = 8;
__device__ __forceinline__ int64_t squareIndex(int64_t round, int j, int half) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  return int64_t(kChunkValues) * (4 * (round * kSquarePasses + j) + (lane & 3)) + 16 * w + (lane >> 2) + 8 * half;
}
static_assert(kSquarePasses * 4 == 32, "a round's chunks are warp 0's lanes");
struct RowSquares {
  double parts[kSquarePasses * 4 * 8];  // W(w) of one round's chunks: [chunk][w]
  double total;                         // S up to the last round added
};
// Adds round r's chunks to S and returns S so far, to every thread (all of the block call it):
// lane c of warp 0 finishes P(c) (rounds have 32 chunks), then the sum runs over them in order.
__device__ __forceinline__ double addRound(RowSquares& rs, const float (&v)[kSquarePasses][2], int64_t round,
                                           int64_t D) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < kSquarePasses; ++j) {
    const double s = treeOverG(pairSquares(v[j][0], v[j][1]));
    if ((lane >> 2) == 0) rs.parts[(4 * j + (lane & 3)) * 8 + w] = s;
  }
  __syncthreads();
  if (w == 0) {
    const int64_t left = (D + kChunkValues - 1) / kChunkValues - round * kSquarePasses * 4;
    const int n = left < kSquarePasses * 4 ? int(left) : kSquarePasses * 4;
    const double p = lane < n ? chunkSum(rs.parts + lane * 8, 1) : 0.0;
    double total = round == 0 ? 0.0 : rs.total;
    for (int c = 0; c < n; ++c) total += __shfl_sync(0xFFFFFFFFu, p, c);  // n: the same in every lane
    if (lane == 0) rs.total = total;
  }
  __syncthreads();  // (also: parts may be rewritten, total read until the next round's first barrier)
  return rs.total;
}

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

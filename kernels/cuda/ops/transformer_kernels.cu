// The element-wise and per-row transformer kernels of the CUDA TransformerOps (the attention
// kernel is in attention.cu). Each mirrors the CPU reference in cpu_transformer_ops.cpp /
// transformer_ops.cpp expression for expression; reductions run in double where the CPU's do,
// so the two differ only by summation order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <type_traits>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/common/residual_norm.cuh"
#include "kernels/cuda/common/rope_pair.cuh"
#include "kernels/cuda/common/swiglu.cuh"
#include "kernels/cuda/ops/transformer_launch.h"
#include "kernels/quant/fp8.h"
#include "kernels/quant/quant_math.h"

namespace qs::cuda_ops {

namespace {

using cuda::launchChained;
using cuda::allowDependentLaunch;
using cuda::waitForPriorGrids;

constexpr int kRowThreads = cuda::kResidualNormThreads;  // one block per row for the row kernels
constexpr int kWarpsPerRow = kRowThreads / 32;
constexpr int kFlatThreads = 256;

int flatBlocks(int64_t n) {
  // Grid-stride loops: enough blocks to fill the device several times over, never more than n.
  const int64_t b = (n + kFlatThreads - 1) / kFlatThreads;
  return int(b < 1 ? 1 : (b > 65536 ? 65536 : b));
}

// Sum over the block (every thread gets the result). `red` holds kWarpsPerRow values.
template <typename T>
__device__ T blockSum(T v, T* red) {
  return cuda::blockSum<kWarpsPerRow>(v, red);
}

__device__ float blockMax(float v, float* red) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = red[0];
  for (int i = 1; i < kWarpsPerRow; ++i) t = fmaxf(t, red[i]);
  return t;
}

// (value, index) argmax with ties to the lowest index.
struct ArgMax {
  float v;
  int i;
};
__device__ ArgMax better(ArgMax a, ArgMax b) {
  if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
  return a;
}
__device__ ArgMax blockArgMax(ArgMax a, ArgMax* red) {
  for (int off = 16; off > 0; off >>= 1) {
    ArgMax o{__shfl_xor_sync(0xFFFFFFFFu, a.v, off), __shfl_xor_sync(0xFFFFFFFFu, a.i, off)};
    a = better(a, o);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) red[warp] = a;
  __syncthreads();
  ArgMax t = red[0];
  for (int i = 1; i < kWarpsPerRow; ++i) t = better(t, red[i]);
  return t;
}

// fromHalf + add + rmsNorm + toHalf of one row, each value by the same expression as those kernels,
// the sum of squares in residual_norm.cuh's order (which the skinny GEMM's norm prologue and
// epilogue share), so the GEMMs' normed activations are these bit for bit. Rows of up to 4,096
// values (one round) stay in registers, every load of the row issued at once (a decode step's
// single row otherwise waits for one load latency per loop trip); longer rows are read again.
__global__ void residualRmsNormKernel(float* __restrict__ x, const __half* __restrict__ yh,
                                      const float* __restrict__ bias, const float* __restrict__ w, int64_t D,
                                      float eps, float* __restrict__ h, __half* __restrict__ hh, int early) {
  static_assert(kRowThreads == cuda::kResidualNormThreads, "the norm's summation order needs 256 threads");
  if (early) allowDependentLaunch();  // the next GEMM may start streaming its weights
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  __shared__ cuda::RowSquares rs;
  float* xr = x + int64_t(blockIdx.x) * D;
  const __half* yr = yh ? yh + int64_t(blockIdx.x) * D : nullptr;
  float* o = h + int64_t(blockIdx.x) * D;
  __half* oh = hh ? hh + int64_t(blockIdx.x) * D : nullptr;
  constexpr int64_t kRound = int64_t(cuda::kSquarePasses) * 4 * cuda::kChunkValues;
  const int64_t rounds = (D + kRound - 1) / kRound;
  // The norm weights are loaded with the row, before the sum: their latency overlaps it.
  float v[cuda::kSquarePasses][2], wv[cuda::kSquarePasses][2];
  double total = 0;
  for (int64_t r = 0; r < rounds; ++r) {
    // Every load of the round first, then the adds and their stores: with each store of x
    // between the loads the compiler kept the next load of x behind it (it may alias), one
    // round trip per value, and a prefill's norm of [512, 4096] took ~29 us (H200, session 44).
    float dv[cuda::kSquarePasses][2], bv[cuda::kSquarePasses][2];
#pragma unroll
    for (int j = 0; j < cuda::kSquarePasses; ++j)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int64_t i = cuda::squareIndex(r, j, hf);
        v[j][hf] = wv[j][hf] = dv[j][hf] = bv[j][hf] = 0.0f;
        if (i < D) {
          if (w && rounds == 1) wv[j][hf] = w[i];
          v[j][hf] = xr[i];
          if (yr) dv[j][hf] = __half2float(yr[i]);
          if (yr && bias) bv[j][hf] = bias[i];
        }
      }
    if (yr) {
#pragma unroll
      for (int j = 0; j < cuda::kSquarePasses; ++j)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int64_t i = cuda::squareIndex(r, j, hf);
          if (i >= D) continue;
          v[j][hf] = v[j][hf] + (dv[j][hf] + bv[j][hf]);  // cuda::residualAdd's expression
          xr[i] = v[j][hf];
        }
    }
    if (w) total = cuda::addRound(rs, v, r, D);  // w: the same for the whole block
  }
  if (!w) return;
  const float inv = cuda::rmsInverse(total, D, eps);
  for (int64_t r = 0; r < rounds; ++r)
#pragma unroll
    for (int j = 0; j < cuda::kSquarePasses; ++j)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        const int64_t i = cuda::squareIndex(r, j, hf);
        if (i >= D) continue;
        // One round: the values in registers; more: this thread's own (committed) values again.
        const float res = rounds == 1 ? cuda::rmsScaled(v[j][hf], inv, wv[j][hf]) : cuda::rmsScaled(xr[i], inv, w[i]);
        o[i] = res;
        if (oh) oh[i] = __float2half_rn(res);
      }
}

__global__ void layerNormKernel(const float* __restrict__ x, const float* __restrict__ w,
                                const float* __restrict__ b, int64_t D, float eps,
                                float* __restrict__ out) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  __shared__ double red[kWarpsPerRow];
  const float* xr = x + int64_t(blockIdx.x) * D;
  float* o = out + int64_t(blockIdx.x) * D;
  double s = 0;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += xr[i];
  const double mean = blockSum(s, red) / double(D);
  double v = 0;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) v += (xr[i] - mean) * (xr[i] - mean);
  const double var = blockSum(v, red) / double(D);
  const float inv = float(1.0 / sqrt(var + double(eps)));
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
    o[i] = __fadd_rn(__fmul_rn(__fmul_rn(float(xr[i] - mean), inv), w[i]), b ? b[i] : 0.0f);
}

__global__ void ropeKernel(float* __restrict__ q, float* __restrict__ k,
                           const int32_t* __restrict__ positions, int64_t T, int nHeads,
                           int nKvHeads, int hd, float theta, bool interleaved) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  const int half = hd / 2;
  const int heads = nHeads + nKvHeads;
  const int64_t total = T * heads * half;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(idx % half);
    const int h = int((idx / half) % heads);
    const int64_t t = idx / (int64_t(half) * heads);
    // Same expression as the CPU reference (llama2.c's run.c): freq = 1 / theta^(2i / headDim).
    const float freq = 1.0f / powf(theta, float(2 * i) / float(hd));
    const float angle = float(positions[t]) * freq;
    float s, c;
    sincosf(angle, &s, &c);
    float* v = h < nHeads ? q + (t * nHeads + h) * hd : k + (t * nKvHeads + (h - nHeads)) * hd;
    const int a = interleaved ? 2 * i : i;
    const int bb = interleaved ? 2 * i + 1 : i + half;
    const float x0 = v[a], x1 = v[bb];
    v[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    v[bb] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
  }
}

__global__ void swigluKernel(const float* __restrict__ g, const float* __restrict__ u, int64_t n,
                             float* __restrict__ out) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float x = g[i];
    out[i] = __fmul_rn(__fdiv_rn(x, 1.0f + expf(-x)), u[i]);
  }
}

__global__ void geluKernel(float* __restrict__ x, int64_t n) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const float inner = __fmul_rn(kSqrt2OverPi, __fadd_rn(v, __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, v), v), v)));
    x[i] = __fdiv_rn(v, 1.0f + expf(__fmul_rn(-2.0f, inner)));  // ½x(1 + tanh u) = x / (1 + e^(−2u)), no cancellation for x < −2
  }
}

__global__ void addKernel(float* __restrict__ x, const float* __restrict__ y, int64_t n) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

__global__ void addBiasKernel(float* __restrict__ y, const float* __restrict__ bias, int64_t rows,
                              int64_t cols) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] += bias[i % cols];
}

__global__ void toHalfKernel(const float* __restrict__ x, int64_t n, __half* __restrict__ out) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2half_rn(x[i]);
}

__global__ void fromHalfKernel(const __half* __restrict__ x, int64_t rows, int64_t cols,
                               const float* __restrict__ bias, float* __restrict__ out) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __half2float(x[i]) + (bias ? bias[i % cols] : 0.0f);
}

// fromHalfBatch: blockIdx.y picks the item; each the same expression as fromHalfKernel.
struct HalfToFloatItems {
  TransformerOpsHalfItem item[kHalfBatchMax];
};
__global__ void fromHalfBatchKernel(const HalfToFloatItems items) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  const TransformerOpsHalfItem& it = items.item[blockIdx.y];
  const int64_t n = it.rows * it.cols;
  const __half* x = reinterpret_cast<const __half*>(it.x);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / it.cols, c = i - r * it.cols;
    it.out[i] = __half2float(x[r * it.ld + c]) + (it.bias ? it.bias[c] : 0.0f);
  }
}

// A residual step left by a fused GEMM (ResidualCommitItem), done on the way by a flat kernel.
__device__ void commitResidual(const ResidualCommitItem& c) {
  cuda::commitResidualAdd(c.x, reinterpret_cast<const __half*>(c.yh), c.bias, c.n, c.D,
                          blockIdx.x * int64_t(blockDim.x) + threadIdx.x, int64_t(gridDim.x) * blockDim.x);
}

// fromHalfRope: one thread per rotated pair of q or k (ropeKernel's / ropeFreqKernel's
// expressions on fromHalf's values), then one per value of v (fromHalf's).
__global__ void fromHalfRopeKernel(const HalfToFloatItems items, const int32_t* __restrict__ positions, int nHeads,
                                   int nKvHeads, int hd, float theta, const float* __restrict__ invFreq, float mscale,
                                   bool interleaved, const ResidualCommitItem commit, int early) {
  if (early) allowDependentLaunch();  // attention may start loading the cached keys and values
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  if (commit.x) commitResidual(commit);
  const TransformerOpsHalfItem &iq = items.item[0], &ik = items.item[1], &iv = items.item[2];
  const int half = hd / 2;
  const int heads = nHeads + nKvHeads;
  const int64_t T = iq.rows;
  const int64_t pairs = T * heads * half, total = pairs + T * iv.cols;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    if (idx >= pairs) {
      const int64_t j = idx - pairs, r = j / iv.cols, c = j - r * iv.cols;
      iv.out[j] = __half2float(reinterpret_cast<const __half*>(iv.x)[r * iv.ld + c]) + (iv.bias ? iv.bias[c] : 0.0f);
      continue;
    }
    const int i = int(idx % half);
    const int h = int((idx / half) % heads);
    const int64_t t = idx / (int64_t(half) * heads);
    const TransformerOpsHalfItem& it = h < nHeads ? iq : ik;
    const int64_t col0 = int64_t(h < nHeads ? h : h - nHeads) * hd;
    const cuda::RotatedPair r = cuda::ropePair(reinterpret_cast<const __half*>(it.x) + t * it.ld + col0,
                                               it.bias ? it.bias + col0 : nullptr, i, hd, positions[t],
                                               {theta, invFreq, mscale, interleaved ? 1 : 0});
    float* o = it.out + t * it.cols + col0;
    o[r.a] = r.va;
    o[r.b] = r.vb;
  }
}

// swigluHalf: fromHalf (+ bias) of gate and up, swigluKernel's expression, one FP16 rounding.
// kPer consecutive columns a thread: 8 (16-byte loads and store; cols, ld and the pointers in
// steps of 8 values) takes one index division per 8 values instead of one per value; a prefill's
// SwiGLU ([512, 14336] on the 8B) took 42 us a layer one value a thread (H200, session 44).
template <int kPer>
__global__ void swigluHalfKernel(const __half* __restrict__ gh, const float* __restrict__ gbias,
                                 const __half* __restrict__ uh, const float* __restrict__ ubias, int64_t rows,
                                 int64_t cols, int64_t ld, __half* __restrict__ out, const ResidualCommitItem commit,
                                 int early) {
  static_assert(kPer == 1 || kPer == 8, "one value a thread, or 16 bytes");
  if (early) allowDependentLaunch();  // the down projection may start streaming its weights
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  if (commit.x) commitResidual(commit);
  const int64_t groups = cols / kPer, n = rows * groups;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / groups, c = kPer * (i - r * groups);
    using Vec = std::conditional_t<kPer == 8, uint4, __half>;  // kPer halves
    const Vec gv = *reinterpret_cast<const Vec*>(gh + r * ld + c);
    const Vec uv = *reinterpret_cast<const Vec*>(uh + r * ld + c);
    Vec ov;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const float x = __half2float(reinterpret_cast<const __half*>(&gv)[e]) + (gbias ? gbias[c + e] : 0.0f);
      const float u = __half2float(reinterpret_cast<const __half*>(&uv)[e]) + (ubias ? ubias[c + e] : 0.0f);
      reinterpret_cast<__half*>(&ov)[e] = cuda::swigluToHalf(x, u);
    }
    *reinterpret_cast<Vec*>(out + r * cols + c) = ov;
  }
}

__global__ void embeddingKernel(const float* __restrict__ table, const int32_t* __restrict__ tokens,
                                int64_t T, int64_t D, float* __restrict__ out) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  const int64_t n = T * D;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = table[int64_t(tokens[i / D]) * D + i % D];
}

__global__ void copyColumnsKernel(const float* __restrict__ src, int64_t srcCols, int64_t col0,
                                  int64_t rows, int64_t cols, float* __restrict__ dst) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = src[(i / cols) * srcCols + col0 + i % cols];
}

// rintf gives -0 for values in (-0.5, 0) where the host's rounding gives +0; adding +0 makes
// them agree (the sign of a fake-quantised zero must match the CPU's bit for bit).
__device__ __forceinline__ float rintLikeHost(float v) { return __fadd_rn(rintf(v), 0.0f); }

__global__ void actFakeQuantKernel(int kind, float* __restrict__ x, int64_t cols, float staticScale,
                                   int* badRow) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  __shared__ float red[kWarpsPerRow];
  float* xr = x + int64_t(blockIdx.x) * cols;
  if (kind == int(ActFakeKind::F16Cast) || kind == int(ActFakeKind::Bf16Cast)) {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = xr[c];
      if (!isfinite(v)) atomicMin(badRow, int(blockIdx.x));
      xr[c] = kind == int(ActFakeKind::F16Cast) ? roundToHalf(v) : roundToBf16(v);
    }
    return;
  }
  float amax = 0.0f;
  bool finite = true;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = xr[c];
    finite = finite && isfinite(v);
    amax = fmaxf(amax, fabsf(v));
  }
  if (!finite) atomicMin(badRow, int(blockIdx.x));
  amax = blockMax(amax, red);
  const float maxValue = kind == int(ActFakeKind::Int8) ? 127.0f
                         : kind == int(ActFakeKind::E4M3) ? 448.0f
                                                          : 57344.0f;
  const float s = staticScale >= 0.0f ? staticScale : __fdiv_rn(amax, maxValue);
  const float inv = reciprocalOrZero(s);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = __fmul_rn(xr[c], inv);
    float q;
    if (kind == int(ActFakeKind::Int8))
      q = rintLikeHost(clampf(v, -128.0f, 127.0f));
    else if (kind == int(ActFakeKind::E4M3))
      q = roundToFp8E4M3(v);
    else
      q = roundToFp8E5M2(v);
    xr[c] = __fmul_rn(q, s);
  }
}

__global__ void compareLogitsKernel(const float* __restrict__ ref, const float* __restrict__ test,
                                    int64_t V, const int32_t* __restrict__ targets,
                                    DeviceLogitRow* __restrict__ out) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  __shared__ ArgMax redA[kWarpsPerRow];
  __shared__ double redD[kWarpsPerRow];
  const int64_t row = blockIdx.x;
  const float* a = ref + row * V;
  const float* b = test + row * V;
  ArgMax ma{-FLT_MAX, INT_MAX}, mb{-FLT_MAX, INT_MAX};
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    ma = better(ma, ArgMax{a[i], int(i)});
    mb = better(mb, ArgMax{b[i], int(i)});
  }
  ma = blockArgMax(ma, redA);
  mb = blockArgMax(mb, redA);
  double sa = 0, sb = 0;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    sa += exp(double(a[i]) - double(ma.v));
    sb += exp(double(b[i]) - double(mb.v));
  }
  const double lseA = double(ma.v) + log(blockSum(sa, redD));
  const double lseB = double(mb.v) + log(blockSum(sb, redD));
  double kl = 0;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) {
    const double la = double(a[i]) - lseA, lb = double(b[i]) - lseB;
    kl += exp(la) * (la - lb);
  }
  kl = blockSum(kl, redD);
  if (threadIdx.x == 0) {
    DeviceLogitRow r;
    r.kl = kl;
    r.lseRef = lseA;
    r.lseTest = lseB;
    r.argmaxRef = ma.i;
    r.argmaxTest = mb.i;
    const int32_t y = targets ? targets[row] : -1;
    r.targetRef = y >= 0 && y < V ? a[y] : 0.0f;
    r.targetTest = y >= 0 && y < V ? b[y] : 0.0f;
    out[row] = r;
  }
}

}  // namespace

void rmsNorm(const float* x, const float* w, int64_t T, int64_t D, float eps, float* out,
             cudaStream_t stream) {
  if (T <= 0) return;
  // The residual step's kernel without its add and FP16 copy: x is only read (written when
  // the kernel is given an FP16 product to add).
  launchChained(residualRmsNormKernel, unsigned(T), kRowThreads, 0, stream, const_cast<float*>(x), nullptr, nullptr, w, D,
                                                                 eps, out, nullptr, cuda::earlyDependentLaunch() ? 1 : 0);
  QS_CUDA_LAUNCHED("residualRmsNormKernel (rmsNorm)");
}

void layerNorm(const float* x, const float* w, const float* b, int64_t T, int64_t D, float eps,
               float* out, cudaStream_t stream) {
  if (T <= 0) return;
  launchChained(layerNormKernel, unsigned(T), kRowThreads, 0, stream, x, w, b, D, eps, out);
  QS_CUDA_LAUNCHED("layerNormKernel");
}

void rope(float* q, float* k, const int32_t* positions, int64_t T, int nHeads, int nKvHeads,
          int headDim, float theta, bool interleaved, cudaStream_t stream) {
  const int64_t n = T * (nHeads + nKvHeads) * (headDim / 2);
  if (n <= 0) return;
  launchChained(ropeKernel, flatBlocks(n), kFlatThreads, 0, stream, q, k, positions, T, nHeads, nKvHeads,
                                                          headDim, theta, interleaved);
  QS_CUDA_LAUNCHED("ropeKernel");
}

#define QS_FLAT_LAUNCH(kernel, n, ...)                                              \
  do {                                                                              \
    if ((n) > 0) {                                                                  \
      launchChained(kernel, flatBlocks(n), kFlatThreads, 0, stream, __VA_ARGS__);              \
      QS_CUDA_LAUNCHED(#kernel);                                                    \
    }                                                                               \
  } while (0)

void swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  QS_FLAT_LAUNCH(swigluKernel, n, gate, up, n, out);
}
void geluTanh(float* x, int64_t n, cudaStream_t stream) { QS_FLAT_LAUNCH(geluKernel, n, x, n); }
void add(float* x, const float* y, int64_t n, cudaStream_t stream) { QS_FLAT_LAUNCH(addKernel, n, x, y, n); }
void addBias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  QS_FLAT_LAUNCH(addBiasKernel, rows * cols, y, bias, rows, cols);
}
void residualRmsNorm(float* x, const uint16_t* yh, const float* bias, const float* w, int64_t T, int64_t D,
                     float eps, float* h, uint16_t* hh, cudaStream_t stream) {
  if (T <= 0 || D <= 0 || (!yh && !w)) return;
  launchChained(residualRmsNormKernel, unsigned(T), kRowThreads, 0, stream, x, reinterpret_cast<const __half*>(yh), bias, w, D,
                                                                 eps, h, reinterpret_cast<__half*>(hh), cuda::earlyDependentLaunch() ? 1 : 0);
  QS_CUDA_LAUNCHED("residualRmsNormKernel");
}

void toHalf(const float* x, int64_t n, uint16_t* out, cudaStream_t stream) {
  QS_FLAT_LAUNCH(toHalfKernel, n, x, n, reinterpret_cast<__half*>(out));
}
void fromHalfBatch(const TransformerOpsHalfItem* items, int count, cudaStream_t stream) {
  HalfToFloatItems args{};
  int64_t most = 0;
  for (int i = 0; i < count; ++i) {
    args.item[i] = items[i];
    most = std::max(most, items[i].rows * items[i].cols);
  }
  if (most == 0) return;
  launchChained(fromHalfBatchKernel, dim3(flatBlocks(most), unsigned(count)), kFlatThreads, 0, stream, args);
  QS_CUDA_LAUNCHED("fromHalfBatchKernel");
}
void fromHalfRope(const TransformerOpsHalfItem* qkv, const int32_t* positions, int nHeads, int nKvHeads, int headDim,
                  float theta, const float* invFreq, float mscale, bool interleaved, const ResidualCommitItem& commit,
                  cudaStream_t stream) {
  HalfToFloatItems args{};
  for (int i = 0; i < 3; ++i) args.item[i] = qkv[i];
  const int64_t n = qkv[0].rows * (int64_t(nHeads + nKvHeads) * (headDim / 2) + qkv[2].cols);
  if (n <= 0 && !commit.x) return;
  launchChained(fromHalfRopeKernel, flatBlocks(std::max(n, commit.n)), kFlatThreads, 0, stream, args, positions, nHeads,
                nKvHeads, headDim, theta, invFreq, mscale, interleaved, commit, cuda::earlyDependentLaunch() ? 1 : 0);
  QS_CUDA_LAUNCHED("fromHalfRopeKernel");
}
void swigluHalf(const uint16_t* gh, const float* gbias, const uint16_t* uh, const float* ubias, int64_t rows,
                int64_t cols, int64_t ld, uint16_t* out, const ResidualCommitItem& commit, cudaStream_t stream) {
  if (ld <= 0) ld = cols;
  const bool by8 = cols % 8 == 0 && ld % 8 == 0 &&
                   (reinterpret_cast<uintptr_t>(gh) | reinterpret_cast<uintptr_t>(uh) | reinterpret_cast<uintptr_t>(out)) % 16 == 0;
  const int64_t n = std::max(rows * cols / (by8 ? 8 : 1), commit.n);
  if (n <= 0) return;
  launchChained(by8 ? swigluHalfKernel<8> : swigluHalfKernel<1>, flatBlocks(n), kFlatThreads, 0, stream,
                reinterpret_cast<const __half*>(gh), gbias, reinterpret_cast<const __half*>(uh), ubias, rows, cols, ld,
                reinterpret_cast<__half*>(out), commit, cuda::earlyDependentLaunch() ? 1 : 0);
  QS_CUDA_LAUNCHED("swigluHalfKernel");
}
void fromHalf(const uint16_t* x, int64_t rows, int64_t cols, const float* bias, float* out,
              cudaStream_t stream) {
  QS_FLAT_LAUNCH(fromHalfKernel, rows * cols, reinterpret_cast<const __half*>(x), rows, cols, bias, out);
}
void embedding(const float* table, const int32_t* tokens, int64_t T, int64_t D, float* out,
               cudaStream_t stream) {
  QS_FLAT_LAUNCH(embeddingKernel, T * D, table, tokens, T, D, out);
}
void copyColumns(const float* src, int64_t srcCols, int64_t col0, int64_t rows, int64_t cols,
                 float* dst, cudaStream_t stream) {
  QS_FLAT_LAUNCH(copyColumnsKernel, rows * cols, src, srcCols, col0, rows, cols, dst);
}

void fakeQuantActivations(ActFakeKind kind, float* x, int64_t rows, int64_t cols, float staticScale,
                          int* badRow, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  launchChained(actFakeQuantKernel, unsigned(rows), kRowThreads, 0, stream, int(kind), x, cols, staticScale, badRow);
  QS_CUDA_LAUNCHED("actFakeQuantKernel");
}

void compareLogits(const float* ref, const float* test, int64_t T, int64_t V,
                   const int32_t* targets, DeviceLogitRow* out, cudaStream_t stream) {
  if (T <= 0) return;
  launchChained(compareLogitsKernel, unsigned(T), kRowThreads, 0, stream, ref, test, V, targets, out);
  QS_CUDA_LAUNCHED("compareLogitsKernel");
}

namespace {
__global__ void timelineStampKernel(int32_t label, unsigned long long* slots, int capacity, int* count) {
  waitForPriorGrids();  // chained launch (pdl.cuh): the stamp is the previous kernel's end
  unsigned long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  const int i = atomicAdd(count, 1);
  if (i < capacity) {
    slots[2 * size_t(i)] = static_cast<unsigned long long>(static_cast<uint32_t>(label));
    slots[2 * size_t(i) + 1] = ns;
  }
}
}  // namespace

void timelineStamp(int32_t label, uint64_t* slots, int capacity, int* count, cudaStream_t stream) {
  launchChained(timelineStampKernel, 1, 1, 0, stream, label, reinterpret_cast<unsigned long long*>(slots), capacity,
                count);
  QS_CUDA_LAUNCHED("timelineStampKernel");
}

namespace {
// (value, index) as one orderable key: the float's bits mapped to an unsigned order (negative
// values reversed) in the high word, the complemented index in the low word, so that the
// largest key is the largest value at its lowest index. 0 stands for "nothing yet".
__device__ __forceinline__ unsigned long long argmaxKey(float v, int64_t i) {
  const uint32_t u = __float_as_uint(v);
  const uint32_t ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(ordered) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
}

constexpr int kArgmaxThreads = 512;

__global__ void __launch_bounds__(kArgmaxThreads) argmaxKernel(const float* __restrict__ logits, int64_t V,
                                                                unsigned long long* best) {
  waitForPriorGrids();  // chained launch (pdl.cuh)
  __shared__ unsigned long long warpBest[kArgmaxThreads / 32];
  unsigned long long b = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < V; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = logits[i];
    if (v == v) b = max(b, argmaxKey(v, i));
  }
  for (int off = 16; off > 0; off >>= 1) b = max(b, __shfl_xor_sync(0xFFFFFFFFu, b, off));
  if ((threadIdx.x & 31) == 0) warpBest[threadIdx.x >> 5] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) b = max(b, warpBest[w]);
    if (b) atomicMax(best, b);
  }
}

__global__ void greedyFinishKernel(unsigned long long* best, int32_t* io, int32_t* tokens, int capacity) {
  waitForPriorGrids();  // chained launch (pdl.cuh): every argmax block has folded its key in
  const unsigned long long b = *best;
  const int32_t token = b ? int32_t(0xFFFFFFFFu - static_cast<uint32_t>(b)) : 0;
  io[0] = token;
  io[1] += 1;
  const int32_t count = io[2];
  if (count >= 0 && count < capacity) tokens[count] = token;
  io[2] = count + 1;
  *best = 0;  // ready for the next step
}
}  // namespace

void greedyNext(const float* logits, int64_t V, int32_t* io, int32_t* tokens, int capacity,
                unsigned long long* best, cudaStream_t stream) {
  if (V <= 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>((V + kArgmaxThreads * 8 - 1) / (kArgmaxThreads * 8), 132));
  launchChained(argmaxKernel, blocks, kArgmaxThreads, 0, stream, logits, V, best);
  QS_CUDA_LAUNCHED("argmaxKernel");
  launchChained(greedyFinishKernel, 1, 1, 0, stream, best, io, tokens, capacity);
  QS_CUDA_LAUNCHED("greedyFinishKernel");
}

}  // namespace qs::cuda_ops

// Causal grouped-query attention over a KV cache, for prefill (T tokens) and decode (T = 1).
//
// Layout: q [T, nHeads·hd], caches [maxSeq, nKvHeads·hd], out [T, nHeads·hd], row-major FP32.
// One block = one query head × a tile of kQueryTile consecutive queries; 4 warps, each owning
// kQueryTile/4 of those queries. The block walks the keys 0..(last query's position) in tiles
// of 32: the K and V rows of the tile are staged in shared memory once and used by all the
// block's queries (so the cache is read T/kQueryTile times per head instead of T times). Per
// query and key tile a warp computes 32 scores (lane j: key j, q read as a shared-memory
// broadcast), then an online softmax (running max m, running sum l, output rescaled by
// exp(m_old − m_new), as FlashAttention does) and P·V with each lane owning hd/32 output dims.
// Scores, softmax and sums are FP32 like the CPU reference; only the summation order differs.
// Extras (Mistral / Gemma / Phi-3): a sliding window (a query at p sees keys p-window+1 .. p;
// the key walk starts at the tile's first query's window, and a warp skips the key tiles that
// lie wholly before its query's window, so every tile it uses holds a valid key), a score scale
// other than 1/sqrt(hd) (Gemma's query_pre_attn_scalar) and the score soft-cap
// cap · tanh(s / cap) (Gemma 2) applied after the scale, before the softmax.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/ops/transformer_launch.h"

namespace qs::cuda_ops {

namespace {

constexpr int kQueryTile = 16;
constexpr int kWarps = 4;
constexpr int kQueriesPerWarp = kQueryTile / kWarps;
constexpr int kKeyTile = 32;

__global__ void appendKvKernel(const float* __restrict__ k, const float* __restrict__ v,
                               const int32_t* __restrict__ positions, int64_t T, int64_t kvDim,
                               float* __restrict__ kCache, float* __restrict__ vCache) {
  const int64_t n = T * kvDim;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / kvDim, c = i % kvDim;
    const int64_t dst = int64_t(positions[t]) * kvDim + c;
    kCache[dst] = k[i];
    vCache[dst] = v[i];
  }
}

// DPL = output dims per lane (hd ≤ 32·DPL).
template <int DPL>
__global__ void __launch_bounds__(kWarps * 32)
    attentionKernel(const float* __restrict__ q, const float* __restrict__ kCache,
                    const float* __restrict__ vCache, const int32_t* __restrict__ positions,
                    int64_t T, int nHeads, int nKvHeads, int hd, float scale, int window,
                    float softcap, float* __restrict__ out) {
  extern __shared__ float smem[];
  const int ks = hd + 1;                  // K row stride: lane j reads row j, conflict-free
  float* kTile = smem;                    // [kKeyTile][hd + 1]
  float* vTile = kTile + kKeyTile * ks;   // [kKeyTile][hd]
  float* qTile = vTile + kKeyTile * hd;   // [kQueryTile][hd]

  const int h = blockIdx.y;
  const int kvh = h / (nHeads / nKvHeads);
  const int64_t qDim = int64_t(nHeads) * hd, kvDim = int64_t(nKvHeads) * hd;
  const int64_t t0 = int64_t(blockIdx.x) * kQueryTile;
  const int nq = int(T - t0 < kQueryTile ? T - t0 : kQueryTile);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int i = threadIdx.x; i < kQueryTile * hd; i += blockDim.x) {
    const int r = i / hd, c = i % hd;
    qTile[i] = r < nq ? q[(t0 + r) * qDim + int64_t(h) * hd + c] : 0.0f;
  }
  int myPos[kQueriesPerWarp];
  float m[kQueriesPerWarp], l[kQueriesPerWarp], acc[kQueriesPerWarp][DPL];
#pragma unroll
  for (int j = 0; j < kQueriesPerWarp; ++j) {
    const int r = warp * kQueriesPerWarp + j;
    myPos[j] = r < nq ? positions[t0 + r] : -1;  // -1: no query, attends to nothing
    m[j] = -INFINITY;
    l[j] = 0.0f;
#pragma unroll
    for (int d = 0; d < DPL; ++d) acc[j][d] = 0.0f;
  }
  const int lastPos = positions[t0 + nq - 1];  // positions ascend: the tile's largest
  const int firstKey = window > 0 ? max(0, positions[t0] - window + 1) : 0;

  for (int key0 = firstKey; key0 <= lastPos; key0 += kKeyTile) {
    const int nk = lastPos + 1 - key0 < kKeyTile ? lastPos + 1 - key0 : kKeyTile;
    __syncthreads();  // the previous tile is no longer read
    for (int i = threadIdx.x; i < kKeyTile * hd; i += blockDim.x) {
      const int r = i / hd, c = i % hd;
      const int64_t src = int64_t(key0 + r) * kvDim + int64_t(kvh) * hd + c;
      kTile[r * ks + c] = r < nk ? kCache[src] : 0.0f;
      vTile[r * hd + c] = r < nk ? vCache[src] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kQueriesPerWarp; ++j) {
      if (myPos[j] < key0) continue;  // warp-uniform: the whole tile is in this query's future
      if (window > 0 && key0 + nk - 1 <= myPos[j] - window) continue;  // wholly before its window
      const float* qv = qTile + (warp * kQueriesPerWarp + j) * hd;
      const float* kr = kTile + lane * ks;
      float dot = 0.0f;
      for (int c = 0; c < hd; ++c) dot = fmaf(qv[c], kr[c], dot);
      const bool valid = key0 + lane <= myPos[j] && (window <= 0 || key0 + lane > myPos[j] - window);
      float sc = dot * scale;
      if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
      const float s = valid ? sc : -INFINITY;
      float tileMax = s;
      for (int off = 16; off > 0; off >>= 1) tileMax = fmaxf(tileMax, __shfl_xor_sync(0xFFFFFFFFu, tileMax, off));
      const float mNew = fmaxf(m[j], tileMax);  // finite: the tile holds a valid key (see above)
      const float corr = expf(m[j] - mNew);     // 0 on the first tile (m = −inf)
      const float p = valid ? expf(s - mNew) : 0.0f;
      float psum = p;
      for (int off = 16; off > 0; off >>= 1) psum += __shfl_xor_sync(0xFFFFFFFFu, psum, off);
      l[j] = l[j] * corr + psum;
      m[j] = mNew;
#pragma unroll
      for (int d = 0; d < DPL; ++d) acc[j][d] *= corr;
      for (int key = 0; key < nk; ++key) {
        const float pk = __shfl_sync(0xFFFFFFFFu, p, key);
        const float* vr = vTile + key * hd;
#pragma unroll
        for (int d = 0; d < DPL; ++d) {
          const int c = lane + 32 * d;
          if (c < hd) acc[j][d] = fmaf(pk, vr[c], acc[j][d]);
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kQueriesPerWarp; ++j) {
    const int r = warp * kQueriesPerWarp + j;
    if (r >= nq) continue;
    float* o = out + (t0 + r) * qDim + int64_t(h) * hd;
    const float inv = 1.0f / l[j];
#pragma unroll
    for (int d = 0; d < DPL; ++d) {
      const int c = lane + 32 * d;
      if (c < hd) o[c] = acc[j][d] * inv;
    }
  }
}

template <int DPL>
void launchAttention(const float* q, const float* kCache, const float* vCache,
                     const int32_t* positions, int64_t T, int nHeads, int nKvHeads, int hd,
                     float* out, cudaStream_t stream, int window, float scale, float softcap) {
  const size_t smem = size_t(kKeyTile * (hd + 1) + kKeyTile * hd + kQueryTile * hd) * sizeof(float);
  static bool configured = false;  // per instantiation; raising the limit is idempotent
  if (!configured) {
    QS_CUDA_CHECK(cudaFuncSetAttribute(attentionKernel<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(32 * (2 * 32 * DPL + 1) * 4 + kQueryTile * 32 * DPL * 4)));
    configured = true;
  }
  const dim3 grid(unsigned((T + kQueryTile - 1) / kQueryTile), unsigned(nHeads));
  attentionKernel<DPL><<<grid, kWarps * 32, smem, stream>>>(q, kCache, vCache, positions, T, nHeads,
                                                            nKvHeads, hd, scale > 0.0f ? scale : 1.0f / sqrtf(float(hd)),
                                                            window, softcap, out);
  QS_CUDA_LAUNCHED("attentionKernel");
}

}  // namespace

void attention(const float* q, const float* k, const float* v, const int32_t* positions,
               int64_t T, int nHeads, int nKvHeads, int headDim, float* kCache, float* vCache,
               float* out, cudaStream_t stream, int window, float scale, float softcap) {
  if (T <= 0) return;
  if (headDim <= 0 || headDim > 256 || nKvHeads <= 0 || nHeads % nKvHeads != 0)
    throw Error(ErrorKind::Unsupported,
                "CUDA attention takes head sizes up to 256 and nHeads a multiple of nKvHeads (got "
                "headDim " + std::to_string(headDim) + ", " + std::to_string(nHeads) + "/" +
                    std::to_string(nKvHeads) + " heads)");
  const int64_t kvDim = int64_t(nKvHeads) * headDim;
  const int64_t n = T * kvDim;
  const int blocks = int(std::min<int64_t>((n + 255) / 256, 65536));
  appendKvKernel<<<blocks, 256, 0, stream>>>(k, v, positions, T, kvDim, kCache, vCache);
  QS_CUDA_LAUNCHED("appendKvKernel");
  if (headDim <= 32)
    launchAttention<1>(q, kCache, vCache, positions, T, nHeads, nKvHeads, headDim, out, stream, window, scale,
                        softcap);
  else if (headDim <= 64)
    launchAttention<2>(q, kCache, vCache, positions, T, nHeads, nKvHeads, headDim, out, stream, window, scale,
                        softcap);
  else if (headDim <= 128)
    launchAttention<4>(q, kCache, vCache, positions, T, nHeads, nKvHeads, headDim, out, stream, window, scale,
                        softcap);
  else
    launchAttention<8>(q, kCache, vCache, positions, T, nHeads, nKvHeads, headDim, out, stream, window, scale,
                        softcap);
}

}  // namespace qs::cuda_ops

// Causal grouped-query attention over a KV cache, for prefill (T tokens) and decode (T = 1).
// For T > 1 attention() takes the tensor-core kernel first (attention_prefill_mma.cu: head sizes
// 64, 80, 128); the tiled kernel below runs the other head sizes, and QS_PREFILL_ATTENTION=fp32.
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
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <string>

#include "kernels/common/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/pdl.cuh"
#include "kernels/cuda/ops/attention_decode.h"
#include "kernels/cuda/ops/attention_prefill.h"
#include "kernels/cuda/ops/decode_attention_tile.cuh"
#include "kernels/cuda/ops/transformer_launch.h"

namespace qs::cuda_ops {

namespace {

using cuda::launchChained;
using cuda::allowDependentLaunch;
using cuda::waitForPriorGrids;

constexpr int kQueryTile = 16;
constexpr int kWarps = 4;
constexpr int kQueriesPerWarp = kQueryTile / kWarps;
constexpr int kKeyTile = 32;

__global__ void appendKvKernel(const float* __restrict__ k, const float* __restrict__ v,
                               const int32_t* __restrict__ positions, int64_t T, int64_t kvDim,
                               float* __restrict__ kCache, float* __restrict__ vCache) {
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
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
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
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
  launchChained(attentionKernel<DPL>, grid, kWarps * 32, smem, stream, q, kCache, vCache, positions, T, nHeads,
                                                            nKvHeads, hd, scale > 0.0f ? scale : 1.0f / sqrtf(float(hd)),
                                                            window, softcap, out);
  QS_CUDA_LAUNCHED("attentionKernel");
}

// ---- decode: one query, split over the keys (flash-decoding) ---------------------------------
// The tiled kernel above gives a single query one block per head with one busy warp that walks
// every key: at 600 cached positions that is ~20 serial tiles per layer. For T = 1 the keys are
// cut into splits of kDecodeSplit = 32; a block (split, KV head) stages the split's key and value
// rows of its head once in shared memory (coalesced cp.async) for the whole query group that
// shares them (grouped-query attention): warp g is query head kvh·G + g and computes its 32
// scores (lane = key), their max m, Σ exp(s − m) = l and Σ exp(s − m)·v, and a second kernel
// merges the splits per head (the same online-softmax rescaling). The grid covers the caches'
// capacity, not the current position (blocks past it exit at once), so its shape is the same at
// every step and a captured decode graph replays at any position.
constexpr int kDecodeSplit = 32;
constexpr int kMaxGroup = 32;  // query heads per KV head: one warp each, 1024 threads at most

// Shared memory of the split kernel: keys [32][hd + 4] (padded: lane j reads row j as float4
// without bank conflicts), values [32][hd], the group's queries [G][hd].
size_t decodeSplitSmem(int hd, int group) {
  return (size_t(kDecodeSplit) * (hd + 4) + size_t(kDecodeSplit) * hd + size_t(group) * hd) * sizeof(float);
}

template <int DPL>
__global__ void __launch_bounds__(kMaxGroup * 32)
    decodeAttentionSplitKernel(const float* __restrict__ q, const float* __restrict__ kNew,
                               const float* __restrict__ vNew, float* __restrict__ kCache,
                               float* __restrict__ vCache, const int32_t* __restrict__ positions,
                               int nHeads, int nKvHeads, int hd, float scale, int window, float softcap,
                               int nSplits, float* __restrict__ part) {
  extern __shared__ __align__(16) float smem[];
  const int G = nHeads / nKvHeads;
  const int ks = hd + 4;
  float* kTile = smem;                         // [32][hd + 4]
  float* vTile = kTile + kDecodeSplit * ks;    // [32][hd]
  float* qTile = vTile + kDecodeSplit * hd;    // [G][hd]
  const int kvh = blockIdx.y, split = blockIdx.x;
  const int64_t kvDim = int64_t(nKvHeads) * hd;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int pos = positions[0];
  const int first = window > 0 ? max(0, pos - window + 1) : 0;
  const int k0 = split * kDecodeSplit;
  const int jlo = max(first - k0, 0), jhi = min(pos - k0, kDecodeSplit - 1);  // the valid keys, a contiguous run
  // No valid key (past the position, or wholly before the window): the merge reads only the
  // splits from the window's first key to the position.
  if (jlo > jhi) return;
  // Before the wait: only what no kernel of this step writes — the position (written before the
  // step) and the cached rows before it (earlier steps) — so the copies fly while the previous
  // kernel finishes. The new key and value (row pos) come after the wait from kNew / vNew, and
  // the split holding pos appends them to the caches; no block of this grid reads cache row pos.
  const int rowChunks = hd / 4;  // 16-byte pieces per row (hd % 4 == 0, 16-byte rows: checked by the host)
  for (int i = threadIdx.x; i < 2 * kDecodeSplit * rowChunks; i += blockDim.x) {
    const int isV = i >= kDecodeSplit * rowChunks;
    const int r = i - isV * kDecodeSplit * rowChunks;
    const int j = r / rowChunks, c4 = r - j * rowChunks;
    if (j >= jlo && j <= jhi && k0 + j < pos) {
      const float* src = (isV ? vCache : kCache) + int64_t(k0 + j) * kvDim + int64_t(kvh) * hd + 4 * c4;
      float* dst = isV ? vTile + j * hd + 4 * c4 : kTile + j * ks + 4 * c4;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
                   "l"(src));
    }
  }
  asm volatile("cp.async.commit_group;\n" ::);
  waitForPriorGrids();  // chained launch (pdl.cuh): now q, kNew and vNew are written

  if (pos >= k0 && pos < k0 + kDecodeSplit)  // the new row: into the tiles and appended to the caches
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
      const float kv = kNew[int64_t(kvh) * hd + c], vv = vNew[int64_t(kvh) * hd + c];
      kTile[(pos - k0) * ks + c] = kv;
      vTile[(pos - k0) * hd + c] = vv;
      kCache[int64_t(pos) * kvDim + int64_t(kvh) * hd + c] = kv;
      vCache[int64_t(pos) * kvDim + int64_t(kvh) * hd + c] = vv;
    }
  for (int i = threadIdx.x; i < G * hd; i += blockDim.x) qTile[i] = q[int64_t(kvh) * G * hd + i];  // heads kvh·G …
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();

  const int h = kvh * G + warp;
  const bool valid = lane >= jlo && lane <= jhi;
  const float sc = valid ? keyScore<DPL>(kTile + lane * ks, qTile + warp * hd, rowChunks, scale, softcap) : -INFINITY;
  const float m = warpMax(sc);
  const float p = valid ? expf(sc - m) : 0.0f;  // m is finite: some lane is valid
  const float l = warpSum(p);
  // P·V from the staged rows: lane owns dims lane + 32d.
  float acc[DPL];
#pragma unroll
  for (int d = 0; d < DPL; ++d) acc[d] = 0.0f;
  accumulatePV<DPL>(acc, p, vTile, jlo, jhi, hd, lane);
  writePartial<DPL>(part + (int64_t(h) * nSplits + split) * (hd + 2), m, l, acc, hd, lane);
}

// Merges a head's splits: out = Σ_s acc_s·exp(m_s − M) / Σ_s l_s·exp(m_s − M), over the splits
// that hold visible keys (from the position, as the split kernel decides: the others are empty).
__global__ void decodeAttentionMergeKernel(const float* __restrict__ part, const int32_t* __restrict__ positions,
                                           int nSplits, int hd, int window, float* __restrict__ out,
                                           __half* __restrict__ outHalf, int early) {
  if (early) allowDependentLaunch();  // the output projection may start streaming its weights
  waitForPriorGrids();  // chained launch (pdl.cuh): first, before any access
  __shared__ float weight[64];  // exp(m_s − M) / L per split, for up to 64 splits at a time
  const int h = blockIdx.x;
  const float* P = part + int64_t(h) * nSplits * (hd + 2);
  const int pos = positions[0];
  const int s0 = (window > 0 ? max(0, pos - window + 1) : 0) / kDecodeSplit, s1 = min(pos / kDecodeSplit, nSplits - 1);
  // Thread s reads split s0 + s's (m, l); a warp reduction gives M and L (s1 − s0 < 32 · k).
  float M = -INFINITY;
  for (int s = s0 + threadIdx.x; s <= s1; s += blockDim.x)
    if (P[int64_t(s) * (hd + 2) + 1] > 0.0f) M = fmaxf(M, P[int64_t(s) * (hd + 2)]);
  __shared__ float red[4];
  for (int off = 16; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xFFFFFFFFu, M, off));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = M;
  __syncthreads();
  M = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  __syncthreads();
  float L = 0.0f;
  for (int s = s0 + threadIdx.x; s <= s1; s += blockDim.x) {
    const float* Ps = P + int64_t(s) * (hd + 2);
    if (Ps[1] > 0.0f) L += Ps[1] * expf(Ps[0] - M);
  }
  for (int off = 16; off > 0; off >>= 1) L += __shfl_xor_sync(0xFFFFFFFFu, L, off);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = L;
  __syncthreads();
  L = red[0] + red[1] + red[2] + red[3];
  const float inv = 1.0f / L;
  float acc[2] = {0.0f, 0.0f};  // dims threadIdx.x and threadIdx.x + 128 (hd ≤ 256)
  for (int b0 = s0; b0 <= s1; b0 += 64) {
    const int nb = min(64, s1 + 1 - b0);
    __syncthreads();
    if (threadIdx.x < nb) {
      const float* Ps = P + int64_t(b0 + threadIdx.x) * (hd + 2);
      weight[threadIdx.x] = Ps[1] > 0.0f ? expf(Ps[0] - M) * inv : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < nb; ++j) {
      const float* Ps = P + int64_t(b0 + j) * (hd + 2) + 2;
      const float wj = weight[j];
      if (wj == 0.0f) continue;  // an empty split: its acc was never written
      for (int d = 0; d < 2; ++d) {
        const int c = threadIdx.x + 128 * d;
        if (c < hd) acc[d] = fmaf(Ps[c], wj, acc[d]);
      }
    }
  }
  for (int d = 0; d < 2; ++d) {
    const int c = threadIdx.x + 128 * d;
    if (c < hd) {
      out[int64_t(h) * hd + c] = acc[d];
      if (outHalf) outHalf[int64_t(h) * hd + c] = __float2half_rn(acc[d]);
    }
  }
}

int decodeSplits(int maxSeq) { return (maxSeq + kDecodeSplit - 1) / kDecodeSplit; }

template <int DPL>
void launchDecodeAttention(const float* q, const float* kNew, const float* vNew, float* kCache, float* vCache,
                           const int32_t* positions,
                           int nHeads, int nKvHeads, int hd, float scale, int window, float softcap, int maxSeq,
                           float* work, float* out, __half* outHalf, cudaStream_t stream) {
  const int nSplits = decodeSplits(maxSeq);
  const int group = nHeads / nKvHeads;
  static const bool configured = [] {  // above the default 48 KB for wide heads and groups
    QS_CUDA_CHECK(cudaFuncSetAttribute(decodeAttentionSplitKernel<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(decodeSplitSmem(32 * DPL, kMaxGroup))));
    return true;
  }();
  (void)configured;
  launchChained(decodeAttentionSplitKernel<DPL>, dim3(unsigned(nSplits), unsigned(nKvHeads)), unsigned(32 * group),
                decodeSplitSmem(hd, group), stream,
      q, kNew, vNew, kCache, vCache, positions, nHeads, nKvHeads, hd, scale, window, softcap, nSplits, work);
  QS_CUDA_LAUNCHED("decodeAttentionSplitKernel");
  launchChained(decodeAttentionMergeKernel, unsigned(nHeads), 128, 0, stream, work, positions, nSplits, hd, window, out, outHalf,
                cuda::earlyDependentLaunch() ? 1 : 0);
  QS_CUDA_LAUNCHED("decodeAttentionMergeKernel");
}

}  // namespace

void attention(const float* q, const float* k, const float* v, const int32_t* positions,
               int64_t T, int nHeads, int nKvHeads, int headDim, float* kCache, float* vCache,
               float* out, cudaStream_t stream, int window, float scale, float softcap, int maxSeq,
               float* decodeWork, uint16_t* outHalf) {
  if (T <= 0) return;
  if (headDim <= 0 || headDim > 256 || nKvHeads <= 0 || nHeads % nKvHeads != 0)
    throw Error(ErrorKind::Unsupported,
                "CUDA attention takes head sizes up to 256 and nHeads a multiple of nKvHeads (got "
                "headDim " + std::to_string(headDim) + ", " + std::to_string(nHeads) + "/" +
                    std::to_string(nKvHeads) + " heads)");
  const int64_t kvDim = int64_t(nKvHeads) * headDim;
  // The split decode kernel copies and reads rows in 16-byte pieces: head sizes in multiples of 4,
  // 16-byte caches, q, k and v. It appends k and v to the caches itself.
  const bool aligned =
      (reinterpret_cast<uintptr_t>(kCache) | reinterpret_cast<uintptr_t>(vCache) | reinterpret_cast<uintptr_t>(q) |
       reinterpret_cast<uintptr_t>(k) | reinterpret_cast<uintptr_t>(v)) % 16 == 0;
  // One query: the cluster kernel where the device has clusters (attention_decode_cluster.cu),
  // else the split kernel and its merge.
  if (T == 1 && aligned && headDim % 4 == 0) {
    const float sc = scale > 0.0f ? scale : 1.0f / sqrtf(float(headDim));
    DecodeAttentionArgs a;
    a.q = q;
    a.kNew = k;
    a.vNew = v;
    a.kCache = kCache;
    a.vCache = vCache;
    a.positions = positions;
    a.nHeads = nHeads;
    a.nKvHeads = nKvHeads;
    a.headDim = headDim;
    a.scale = sc;
    a.window = window;
    a.softcap = softcap;
    a.out = out;
    a.outHalf = outHalf;
    if (decodeAttentionCluster(a, stream)) return;
  }
  const bool split = T == 1 && decodeWork && maxSeq > 0 && headDim % 4 == 0 && aligned && nHeads / nKvHeads <= kMaxGroup;
  if (!split) {
    const int64_t n = T * kvDim;
    const int blocks = int(std::min<int64_t>((n + 255) / 256, 65536));
    launchChained(appendKvKernel, blocks, 256, 0, stream, k, v, positions, T, kvDim, kCache, vCache);
    QS_CUDA_LAUNCHED("appendKvKernel");
  }
  if (split) {
    const float sc = scale > 0.0f ? scale : 1.0f / sqrtf(float(headDim));
    if (headDim <= 32)
      launchDecodeAttention<1>(q, k, v, kCache, vCache, positions, nHeads, nKvHeads, headDim, sc, window, softcap, maxSeq,
                               decodeWork, out, reinterpret_cast<__half*>(outHalf), stream);
    else if (headDim <= 64)
      launchDecodeAttention<2>(q, k, v, kCache, vCache, positions, nHeads, nKvHeads, headDim, sc, window, softcap, maxSeq,
                               decodeWork, out, reinterpret_cast<__half*>(outHalf), stream);
    else if (headDim <= 128)
      launchDecodeAttention<4>(q, k, v, kCache, vCache, positions, nHeads, nKvHeads, headDim, sc, window, softcap, maxSeq,
                               decodeWork, out, reinterpret_cast<__half*>(outHalf), stream);
    else
      launchDecodeAttention<8>(q, k, v, kCache, vCache, positions, nHeads, nKvHeads, headDim, sc, window, softcap, maxSeq,
                               decodeWork, out, reinterpret_cast<__half*>(outHalf), stream);
    return;
  }
  // More than one query: the tensor-core kernel where it applies (attention_prefill_mma.cu),
  // else the tiled CUDA-core kernel.
  const PrefillAttentionArgs pre{.q = q, .kCache = kCache, .vCache = vCache, .positions = positions, .T = T,
                                 .nHeads = nHeads, .nKvHeads = nKvHeads, .headDim = headDim,
                                 .scale = scale > 0.0f ? scale : 1.0f / sqrtf(float(headDim)), .window = window,
                                 .softcap = softcap, .out = out};
  prefillAttention(pre, T > 1 ? prefillKernelFromEnvironment() : PrefillKernel::CudaCores, stream);
  if (outHalf) toHalf(out, T * int64_t(nHeads) * headDim, outHalf, stream);
}

PrefillKernel prefillAttention(const PrefillAttentionArgs& a, PrefillKernel kernel, cudaStream_t stream) {
  if (a.headDim <= 0 || a.headDim > 256 || a.nKvHeads <= 0 || a.nHeads % a.nKvHeads != 0)
    throw Error(ErrorKind::Unsupported, "CUDA attention takes head sizes up to 256 and nHeads a multiple of nKvHeads");
  if (prefillAttentionMma(a, kernel, stream)) return kernel;
  const int hd = a.headDim;
  if (hd <= 32)
    launchAttention<1>(a.q, a.kCache, a.vCache, a.positions, a.T, a.nHeads, a.nKvHeads, hd, a.out, stream, a.window,
                       a.scale, a.softcap);
  else if (hd <= 64)
    launchAttention<2>(a.q, a.kCache, a.vCache, a.positions, a.T, a.nHeads, a.nKvHeads, hd, a.out, stream, a.window,
                       a.scale, a.softcap);
  else if (hd <= 128)
    launchAttention<4>(a.q, a.kCache, a.vCache, a.positions, a.T, a.nHeads, a.nKvHeads, hd, a.out, stream, a.window,
                       a.scale, a.softcap);
  else
    launchAttention<8>(a.q, a.kCache, a.vCache, a.positions, a.T, a.nHeads, a.nKvHeads, hd, a.out, stream, a.window,
                       a.scale, a.softcap);
  return PrefillKernel::CudaCores;
}

size_t decodeWorkFloats(int nHeads, int headDim, int maxSeq) {
  if (maxSeq <= 0 || headDim % 4 != 0) return 0;
  return size_t(nHeads) * size_t(decodeSplits(maxSeq)) * size_t(headDim + 2);
}

}  // namespace qs::cuda_ops
